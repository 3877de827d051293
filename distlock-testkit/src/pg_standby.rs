//! A PostgreSQL primary with a streaming standby, synchronous or
//! asynchronous, and the standby's promotion: for failover tests.
//!
//! The standby is a copy of the primary taken with `pg_basebackup -R`,
//! started on its own port; it follows the primary over streaming
//! replication and serves reads (hot standby, PostgreSQL's default).

use std::ffi::OsStr;
use std::time::Duration;

use crate::postgres::{self, Origin, PgServer};
use crate::unprivileged::{run_tool, unprivileged_user};
use crate::{eventually, postgres::pg_program};

/// The standby's name on the primary: its `application_name` (from its
/// `cluster_name`), which `synchronous_standby_names` lists.
pub const STANDBY_NAME: &str = "standby";
/// How long a promotion may take before [`StreamingPair::promote`] fails.
const PROMOTE_LIMIT: Duration = Duration::from_secs(60);

/// When the primary reports a commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replication {
    /// Once the standby has flushed the commit's WAL to disk
    /// (`synchronous_standby_names` naming it, `synchronous_commit` at its
    /// default `on`): a promoted standby has every reported commit.
    Synchronous,
    /// Without waiting for the standby: a promoted standby may lack the
    /// last commits the primary reported.
    Asynchronous,
}

/// A primary and its streaming standby.
#[derive(Debug)]
pub struct StreamingPair {
    /// The server taking writes.
    pub primary: PgServer,
    /// The copy following it; read-only until [`StreamingPair::promote`].
    pub standby: PgServer,
    replication: Replication,
}

impl StreamingPair {
    /// Starts a primary, copies it into a standby and starts the standby,
    /// waiting until the primary sees it streaming (in `pg_stat_replication`,
    /// as `sync` for [`Replication::Synchronous`]).
    pub async fn start(replication: Replication) -> Result<Self, String> {
        let settings = match replication {
            // Set from the start: nothing commits on the primary before the
            // standby is up (the base backup does not wait for it).
            Replication::Synchronous => vec![format!("synchronous_standby_names={STANDBY_NAME}")],
            Replication::Asynchronous => Vec::new(),
        };
        let primary = PgServer::start_with("postgres-primary", settings).await?;
        let origin = Origin::BaseBackup(primary.server().port(), primary.password().to_owned());
        let standby_settings = vec![format!("cluster_name={STANDBY_NAME}")];
        let spec = postgres::spec(
            "postgres-standby",
            origin,
            standby_settings,
            unprivileged_user()?,
        )?;
        let server = spec.start().await?;
        let standby = PgServer::from_parts(server, primary.password().to_owned());
        let pair = Self {
            primary,
            standby,
            replication,
        };
        pair.wait_streaming().await?;
        Ok(pair)
    }

    /// How the primary waits for the standby.
    pub fn replication(&self) -> Replication {
        self.replication
    }

    /// Waits until the primary lists the standby as streaming with the
    /// expected sync state.
    async fn wait_streaming(&self) -> Result<(), String> {
        let expected = match self.replication {
            Replication::Synchronous => "streaming|sync",
            Replication::Asynchronous => "streaming|async",
        };
        let sql = format!(
            "SELECT state, sync_state FROM pg_stat_replication \
             WHERE application_name = '{STANDBY_NAME}'"
        );
        let (primary, sql) = (&self.primary, &sql);
        eventually(PROMOTE_LIMIT, "the standby streaming", || async move {
            let answer = primary.psql(sql).await?;
            if answer == expected {
                Ok(())
            } else {
                Err(format!(
                    "pg_stat_replication says {answer:?}, expected {expected:?}"
                ))
            }
        })
        .await
    }

    /// Promotes the standby with `pg_ctl promote` and waits until it
    /// accepts writes (`pg_is_in_recovery()` is false). The primary is
    /// left as it is: kill it first to simulate its loss.
    pub async fn promote(&self) -> Result<(), String> {
        let pg_ctl = pg_program("pg_ctl")?;
        let cluster = self.standby.cluster_dir();
        let limit = PROMOTE_LIMIT.as_secs().to_string();
        let args: [&OsStr; 6] = [
            "promote".as_ref(),
            "-D".as_ref(),
            cluster.as_os_str(),
            "-w".as_ref(),
            "-t".as_ref(),
            limit.as_ref(),
        ];
        run_tool(&pg_ctl, &args, &[], unprivileged_user()?).await?;
        let standby = &self.standby;
        eventually(
            PROMOTE_LIMIT,
            "the promoted standby to accept writes",
            || async move {
                match standby.psql("SELECT pg_is_in_recovery()").await {
                    Ok(answer) if answer == "f" => Ok(()),
                    Ok(answer) => Err(format!("pg_is_in_recovery() is {answer:?}")),
                    Err(e) => Err(e),
                }
            },
        )
        .await
    }
}
