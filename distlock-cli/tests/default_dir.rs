//! Without `--url` or `DISTLOCK_URL`, every user of the host locks in one
//! default directory: root and `nobody` exclude each other through it,
//! whatever `XDG_RUNTIME_DIR` says (set, unset, different per user), for
//! locks, read locks and permits; and whoever frees a name removes its
//! files, whoever created them.
//!
//! These tests run `distlock` as root and, through `setpriv`, as user
//! `nobody`, so they need root (CI runs as root). Without it they fail
//! saying so; they never pass without having run. Each uses keys of its
//! own and checks that it leaves nothing of them in the default directory.

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

use common::{output, stderr, wait, wait_for};

/// `distlock run`'s exit code when the lock is not had within `--wait`.
const TEMPFAIL: i32 = 75;

/// Who runs a `distlock` command.
#[derive(Clone, Copy, Debug)]
enum User {
    Root,
    Nobody,
}

/// What `XDG_RUNTIME_DIR` is for a command.
#[derive(Clone, Copy, Debug)]
enum Xdg {
    Unset,
    Set(&'static str),
}

const XDG_CASES: [Xdg; 2] = [Xdg::Unset, Xdg::Set("/tmp/whatever")];

/// A copy of `distlock` that `nobody` may run (the target directory may
/// not be reachable for it), in the temp directory under a name of this
/// build's binary (size and modification time), so that runs share it
/// instead of leaving a copy each. Made once per test process, before any
/// test starts a process: no child forked meanwhile can hold the copy open
/// for writing when it is run ("text file busy").
fn runnable_binary() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let original = Path::new(env!("CARGO_BIN_EXE_distlock"));
        let meta = fs::metadata(original).expect("the distlock binary");
        let stamp = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos());
        let bin = std::env::temp_dir().join(format!("distlock-test-{}-{stamp}", meta.len()));
        if !bin.exists() {
            let partial = bin.with_extension(format!("partial-{}", std::process::id()));
            fs::copy(original, &partial).expect("copy the distlock binary");
            chmod(&partial, 0o755);
            fs::rename(&partial, &bin).expect("put the copy in place");
        }
        bin
    })
}

/// Everything one test needs: the binary where `nobody` can run it, a
/// scratch directory everyone may write to, and the default directory.
struct Setup {
    /// The copy of `distlock` (mode 0755) that `nobody` may run.
    bin: &'static Path,
    scratch: tempfile::TempDir,
    /// `<default directory>/default`: the default namespace's directory.
    namespace_dir: PathBuf,
    nobody: (u32, u32),
}

impl Setup {
    fn new() -> Self {
        // SAFETY: geteuid has no preconditions and cannot fail.
        let euid = unsafe { libc::geteuid() };
        assert_eq!(
            euid, 0,
            "this test needs root: it runs distlock as root and as user nobody \
             (through setpriv) to check that both lock in one shared default \
             directory; run it as root, as CI does"
        );
        let scratch = tempfile::tempdir().unwrap();
        chmod(scratch.path(), 0o1777);
        let default = distlock::file::default_dir().expect("a default directory");
        eprintln!("default directory: {default:?}");
        Self {
            bin: runnable_binary(),
            scratch,
            namespace_dir: default.path.join("default"),
            nobody: nobody(),
        }
    }

    /// `distlock ARGS...` as `user`, with `xdg`, no URL, from `/`, with a
    /// restrictive umask (what root creates must not depend on it).
    fn distlock(&self, user: User, xdg: Xdg, args: &[&str]) -> Command {
        let mut command = Command::new("setpriv");
        match user {
            User::Root => command.arg("--"),
            User::Nobody => command.args([
                format!("--reuid={}", self.nobody.0),
                format!("--regid={}", self.nobody.1),
                "--clear-groups".to_owned(),
                "--".to_owned(),
            ]),
        };
        command
            .arg("sh")
            .arg("-c")
            .arg("umask 077; exec \"$@\"")
            .arg("sh");
        command.arg(self.bin).args(args);
        command
            .current_dir("/")
            .env_remove("DISTLOCK_URL")
            .env_remove("DISTLOCK_LOG")
            .env_remove("TMPDIR");
        match xdg {
            Xdg::Unset => command.env_remove("XDG_RUNTIME_DIR"),
            Xdg::Set(dir) => command.env("XDG_RUNTIME_DIR", dir),
        };
        command
    }

    /// Starts `distlock run KEY FLAGS -- CMD` as `user` (no
    /// `XDG_RUNTIME_DIR`), CMD waiting for a stop file; returns once CMD
    /// runs, that is once the lock is held.
    fn hold(&self, user: User, key: &str, flags: &[&str]) -> Holder {
        let tag = format!("{key}-{user:?}-{}", flags.join(""));
        let (ready, stop) = (
            self.scratch.path().join(format!("{tag}.ready")),
            self.scratch.path().join(format!("{tag}.stop")),
        );
        let script = format!(
            "touch '{}'; while [ ! -e '{}' ]; do sleep 0.02; done",
            ready.display(),
            stop.display()
        );
        let mut args = vec!["run", key];
        args.extend_from_slice(flags);
        args.extend(["--", "sh", "-c", &script]);
        let mut child = self
            .distlock(user, Xdg::Unset, &args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn the holder");
        wait_for(
            || ready.exists() || child.try_wait().unwrap().is_some(),
            "the holder's command to start",
        );
        let holder = Holder {
            child: Some(child),
            stop,
        };
        assert!(ready.exists(), "{user:?} could not hold {key} {flags:?}");
        holder
    }

    /// Asserts that `distlock run KEY --wait 0 FLAGS -- true`, as `user`
    /// with each `XDG_RUNTIME_DIR`, is refused with exit 75.
    fn assert_refused(&self, user: User, key: &str, flags: &[&str]) {
        for xdg in XDG_CASES {
            let out = self.try_run(user, xdg, key, flags);
            assert_eq!(
                out.status.code(),
                Some(TEMPFAIL),
                "{user:?} with XDG_RUNTIME_DIR {xdg:?} was not refused {key} {flags:?}: {}",
                stderr(&out)
            );
        }
    }

    /// Asserts that `distlock run KEY --wait 0 FLAGS -- true`, as `user`
    /// with each `XDG_RUNTIME_DIR`, runs.
    fn assert_runs(&self, user: User, key: &str, flags: &[&str]) {
        for xdg in XDG_CASES {
            let out = self.try_run(user, xdg, key, flags);
            assert!(
                out.status.success(),
                "{user:?} with XDG_RUNTIME_DIR {xdg:?} could not take {key} {flags:?}: {}",
                stderr(&out)
            );
        }
    }

    fn try_run(&self, user: User, xdg: Xdg, key: &str, flags: &[&str]) -> std::process::Output {
        let mut args = vec!["run", key, "--wait", "0"];
        args.extend_from_slice(flags);
        args.extend(["--", "true"]);
        output(self.distlock(user, xdg, &args))
    }

    /// Stops `holder`, the last one holding `key`, and checks it left
    /// none of the key's files behind.
    fn stop_last(&self, holder: Holder, key: &str) {
        holder.stop();
        self.assert_no_files_of(key);
    }

    /// Checks no entry of the default directory belongs to `key`.
    fn assert_no_files_of(&self, key: &str) {
        assert_eq!(self.files_of(key), Vec::<String>::new());
    }

    /// The entries of the default namespace's directory that belong to
    /// `key` (its lock file, gate, readers' and permits' directories).
    fn files_of(&self, key: &str) -> Vec<String> {
        fs::read_dir(&self.namespace_dir)
            .map(|entries| {
                entries
                    .map(|e| e.unwrap().file_name().into_string().unwrap())
                    .filter(|name| name.split('.').next() == Some(key))
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// A running `distlock run` whose command waits for its stop file.
/// Dropped without [`stop`](Self::stop) (a failed test), it stops
/// distlock with SIGTERM, which releases the lock.
struct Holder {
    child: Option<Child>,
    stop: PathBuf,
}

impl Holder {
    /// Lets the command end and waits for distlock to exit 0.
    fn stop(mut self) {
        let mut child = self.child.take().expect("running");
        fs::write(&self.stop, "").unwrap();
        let status = wait(&mut child);
        let mut message = String::new();
        if let Some(mut err) = child.stderr.take() {
            std::io::Read::read_to_string(&mut err, &mut message).unwrap();
        }
        assert!(status.success(), "the holder failed: {message}");
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            common::signal(child.id(), libc::SIGTERM);
            let _ = child.wait();
        }
    }
}

fn chmod(path: &Path, mode: u32) {
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
}

/// User `nobody`'s uid and primary gid.
fn nobody() -> (u32, u32) {
    // SAFETY: getpwnam gets a NUL-terminated name; the record it returns
    // is read at once, before any other call could reuse it.
    unsafe {
        let record = libc::getpwnam(c"nobody".as_ptr());
        assert!(!record.is_null(), "no user nobody on this host");
        ((*record).pw_uid, (*record).pw_gid)
    }
}

/// A fresh [`Setup`] and key (from `test`), the key held by root with
/// `run`'s `flags`.
fn root_holds(test: &str, flags: &[&str]) -> (Setup, String, Holder) {
    let setup = Setup::new();
    let key = unique_key(test);
    let holder = setup.hold(User::Root, &key, flags);
    (setup, key, holder)
}

/// A key no other test or run uses (lower case: its file name is itself).
fn unique_key(test: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("default-dir-{test}-{}-{nanos:x}", std::process::id())
}

#[test]
fn root_and_nobody_exclude_each_other_through_the_default_directory() {
    let (setup, key, holder) = root_holds("exclusive", &[]);
    assert!(
        setup.namespace_dir.join(format!("{key}.lock")).exists(),
        "the lock file is not in the default directory"
    );
    setup.assert_refused(User::Nobody, &key, &[]);
    setup.stop_last(holder, &key);

    let holder = setup.hold(User::Nobody, &key, &[]);
    setup.assert_refused(User::Root, &key, &[]);
    setup.stop_last(holder, &key);
}

#[test]
fn read_locks_are_shared_between_users_and_the_last_out_removes_them() {
    let (setup, key, root) = root_holds("shared", &["--shared"]);
    setup.assert_runs(User::Nobody, &key, &["--shared"]);
    setup.assert_refused(User::Nobody, &key, &[]);
    // Root created the lock file and readers' directory; nobody, the
    // last reader out, removes them.
    let nobody = setup.hold(User::Nobody, &key, &["--shared"]);
    root.stop();
    assert!(!setup.files_of(&key).is_empty(), "removed under a reader");
    setup.assert_refused(User::Root, &key, &[]);
    setup.stop_last(nobody, &key);
}

#[test]
fn permits_are_counted_across_users_and_the_last_out_removes_them() {
    let (setup, key, root) = root_holds("permits", &["--permits", "2"]);
    let nobody = setup.hold(User::Nobody, &key, &["--permits", "2"]);
    setup.assert_refused(User::Root, &key, &["--permits", "2"]);
    setup.assert_refused(User::Nobody, &key, &["--permits", "2"]);
    // Root created the semaphore's files; nobody, the last holder out,
    // removes them.
    root.stop();
    setup.stop_last(nobody, &key);
}

#[test]
fn the_default_directory_does_not_follow_xdg_runtime_dir() {
    let setup = Setup::new();
    let key = unique_key("xdg");
    let runtime = tempfile::tempdir().unwrap();
    let lock_file = setup.namespace_dir.join(format!("{key}.lock"));
    let check = format!("test -e '{}'", lock_file.display());
    let mut run = setup.distlock(
        User::Root,
        Xdg::Unset,
        &["run", &key, "--", "sh", "-c", &check],
    );
    run.env("XDG_RUNTIME_DIR", runtime.path());
    let out = output(run);
    assert!(
        out.status.success(),
        "the lock file was not in the default directory: {}",
        stderr(&out)
    );
    assert!(!runtime.path().join("distlock").exists());
    setup.assert_no_files_of(&key);
}

#[test]
fn status_and_verbose_name_the_default_directory() {
    let setup = Setup::new();
    let key = unique_key("named");
    let out = output(setup.distlock(User::Root, Xdg::Unset, &["-v", "status", &key]));
    assert!(out.status.success(), "{}", stderr(&out));
    let said = "file:///var/lib/distlock (the default directory)";
    assert_eq!(stderr(&out).trim(), format!("distlock: store {said}"));
    let text = common::stdout(&out);
    assert_eq!(
        text.lines().last(),
        Some(format!("asked file store {said}, namespace default").as_str()),
        "{text}"
    );
}
