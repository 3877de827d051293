//! A cron-style job that must not run twice: every run tries the job's
//! lock once (`try_lock`); the run that gets it does the job, the others
//! skip it and say so.
//!
//! Run it with `cargo run --example cron_job`. It starts three copies of
//! itself at once, as a cron daemon on three hosts would at midnight, and
//! checks that exactly one did the job. Against a shared store, set
//! `DISTLOCK_URL` (for example `redis://127.0.0.1:6379`) and start it on
//! several machines.

use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Set in the copies: which one this is.
const INSTANCE: &str = "CRON_JOB_INSTANCE";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    match std::env::var(INSTANCE) {
        Ok(instance) => one_run(&instance).await,
        Err(_) => start_three(),
    }
}

/// One cron invocation of the job.
async fn one_run(instance: &str) -> Result<(), Box<dyn std::error::Error>> {
    let locks = distlock_examples::locker("cron-example").await?;
    // Wait for the go (a line on stdin), so that the three runs try at
    // the same moment, as cron starts them.
    std::io::stdin().read_line(&mut String::new())?;
    match locks.try_lock("nightly-report").await? {
        Some(guard) => {
            println!(
                "run {instance}: doing the nightly report (fencing token {})",
                guard.token()
            );
            // The job. Send guard.token() with every write it makes, so
            // that a store can refuse a run that lost its lock.
            tokio::time::sleep(Duration::from_secs(1)).await;
            guard.release().await?;
            println!("run {instance}: done");
        }
        None => println!("run {instance}: another run is doing the report; skipping"),
    }
    Ok(())
}

/// Starts three runs at once and checks that one of them did the job.
fn start_three() -> Result<(), Box<dyn std::error::Error>> {
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
    let runs: Vec<_> = children
        .into_iter()
        .map(Child::wait_with_output)
        .collect::<Result<_, _>>()?;
    let mut did_the_job = 0;
    for run in &runs {
        let out = String::from_utf8_lossy(&run.stdout);
        print!("{out}");
        if !run.status.success() {
            return Err(format!("a run failed: {}", String::from_utf8_lossy(&run.stderr)).into());
        }
        did_the_job += out.matches("doing the nightly report").count();
    }
    println!("{did_the_job} of 3 runs did the job");
    if did_the_job != 1 {
        return Err("the job must run exactly once".into());
    }
    Ok(())
}
