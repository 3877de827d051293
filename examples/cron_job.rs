//! A cron-style job that must not run twice: every run tries the job's
//! lock once (`try_lock`); the run that gets it does the job, the others
//! skip it and say so.
//!
//! Run it with `cargo run --example cron_job`. It starts three copies of
//! itself at once, as a cron daemon on three hosts would at midnight, and
//! checks that exactly one did the job. Against a shared store, set
//! `DISTLOCK_URL` (for example `redis://127.0.0.1:6379`) and start it on
//! several machines. A `mem://` store lives in one process only, so with
//! it the three runs are three tasks of this process instead.

use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use distlock::Locker;
use tokio::sync::Barrier;

/// Set in the copies: which one this is.
const INSTANCE: &str = "CRON_JOB_INSTANCE";

type Error = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> Result<(), Error> {
    if let Ok(instance) = std::env::var(INSTANCE) {
        let locks = distlock_examples::locker("cron-example").await?;
        // Wait for the go (a line on stdin), so that the three runs try
        // at the same moment, as cron starts them.
        std::io::stdin().read_line(&mut String::new())?;
        print!("{}", one_run(&locks, &instance).await?);
        return Ok(());
    }
    let in_process = std::env::var("DISTLOCK_URL").is_ok_and(|url| url.starts_with("mem://"));
    let outputs = if in_process {
        three_tasks().await?
    } else {
        three_processes()?
    };
    let mut did_the_job = 0;
    for output in &outputs {
        print!("{output}");
        did_the_job += output.matches("doing the nightly report").count();
    }
    println!("{did_the_job} of 3 runs did the job");
    if did_the_job != 1 {
        return Err("the job must run exactly once".into());
    }
    Ok(())
}

/// One cron invocation of the job; returns what it has to say.
async fn one_run(locks: &Locker, instance: &str) -> Result<String, Error> {
    let mut said = String::new();
    match locks.try_lock("nightly-report").await? {
        Some(guard) => {
            said += &format!(
                "run {instance}: doing the nightly report (fencing token {})\n",
                guard.token()
            );
            // The job. Send guard.token() with every write it makes, so
            // that a store can refuse a run that lost its lock.
            tokio::time::sleep(Duration::from_secs(1)).await;
            guard.release().await?;
            said += &format!("run {instance}: done\n");
        }
        None => said += &format!("run {instance}: another run is doing the report; skipping\n"),
    }
    Ok(said)
}

/// Starts three copies of this program at once; returns their outputs.
fn three_processes() -> Result<Vec<String>, Error> {
    let me = std::env::current_exe()?;
    let mut children: Vec<Child> = (1..=3)
        .map(|n| {
            Command::new(&me)
                .env(INSTANCE, n.to_string())
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
        })
        .collect::<Result<_, _>>()?;
    for child in &mut children {
        child.stdin.take().expect("piped").write_all(b"go\n")?;
    }
    let mut outputs = Vec::new();
    for child in children {
        let run = child.wait_with_output()?;
        if !run.status.success() {
            return Err(format!("a run failed: {}", String::from_utf8_lossy(&run.stderr)).into());
        }
        outputs.push(String::from_utf8_lossy(&run.stdout).into_owned());
    }
    Ok(outputs)
}

/// Runs three invocations as tasks of this process, each with its own
/// locker, started together; returns their outputs.
async fn three_tasks() -> Result<Vec<String>, Error> {
    let go = Arc::new(Barrier::new(3));
    let mut runs = Vec::new();
    for n in 1..=3 {
        let locks = distlock_examples::locker("cron-example").await?;
        let go = Arc::clone(&go);
        runs.push(tokio::spawn(async move {
            go.wait().await;
            one_run(&locks, &n.to_string()).await
        }));
    }
    let mut outputs = Vec::new();
    for run in runs {
        outputs.push(run.await??);
    }
    Ok(outputs)
}
