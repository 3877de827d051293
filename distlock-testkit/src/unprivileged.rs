//! Running servers that refuse to run as root (PostgreSQL, PgBouncer) as
//! an unprivileged user when the tests run as root.

use std::ffi::CString;
use std::process::Output;

/// The user and group ids a server runs as; see
/// [`ServerSpec::run_as`](crate::ServerSpec::run_as).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunAs {
    /// The user id.
    pub uid: u32,
    /// The group id (also the only group: supplementary groups are dropped).
    pub gid: u32,
}

/// The user such servers run as when this process is root.
pub const UNPRIVILEGED_USER: &str = "nobody";

/// Whom a server that refuses root runs as: `None` when this process is
/// not root (the server runs as this process's user), else the ids of
/// [`UNPRIVILEGED_USER`]. Fails if root and that user does not exist.
pub fn unprivileged_user() -> Result<Option<RunAs>, String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(None);
    }
    lookup(UNPRIVILEGED_USER).map(Some)
}

/// The ids of user `name`, from the password database.
fn lookup(name: &str) -> Result<RunAs, String> {
    let c_name = CString::new(name).map_err(|_| format!("bad user name {name:?}"))?;
    let mut buf: Vec<libc::c_char> = vec![0; 16 * 1024];
    // SAFETY: `entry` and `buf` outlive the call, whose results it points
    // into; `found` is written by the call.
    unsafe {
        let mut entry: libc::passwd = std::mem::zeroed();
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        let rc = libc::getpwnam_r(
            c_name.as_ptr(),
            &mut entry,
            buf.as_mut_ptr(),
            buf.len(),
            &mut found,
        );
        if rc != 0 || found.is_null() {
            return Err(format!(
                "user {name:?} not found (tests run as root start servers that \
                 refuse root as this user)"
            ));
        }
        Ok(RunAs {
            uid: entry.pw_uid,
            gid: entry.pw_gid,
        })
    }
}

/// Runs `program` with `args` and extra environment `env` as `user` (if
/// any) and returns its stdout; an error names the program and quotes
/// its stderr. The child is killed if the returned future is dropped.
/// For short-lived tools (`initdb`, `pg_ctl`, `psql`), not servers.
pub async fn run_tool(
    program: &std::path::Path,
    args: &[&std::ffi::OsStr],
    env: &[(&str, &str)],
    user: Option<RunAs>,
) -> Result<String, String> {
    let mut command = tokio::process::Command::new(program);
    command
        .args(args)
        .envs(env.iter().copied())
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    if let Some(user) = user {
        command.uid(user.uid).gid(user.gid);
        // A tool run as another user must not start in a dir it cannot read.
        command.current_dir("/");
    }
    let Output {
        status,
        stdout,
        stderr,
    } = command
        .output()
        .await
        .map_err(|e| format!("cannot run {}: {e}", program.display()))?;
    if !status.success() {
        return Err(format!(
            "{} failed ({status}): {}{}",
            program.display(),
            String::from_utf8_lossy(&stderr).trim(),
            String::from_utf8_lossy(&stdout).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&stdout).into_owned())
}
