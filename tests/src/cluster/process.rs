//! Child processes the tests own: started with their output in a log file, stopped (SIGTERM, then
//! SIGKILL after 5 s) when the handle is dropped — also when the test panics.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::Context;

/// A child process with its log file. Killed on drop unless detached.
pub struct Supervised {
    name: String,
    child: Mutex<Option<Child>>,
    log: PathBuf,
    detach: bool,
    /// The program and arguments, for [`Supervised::restart`] (`None` for a prepared command).
    program: Option<(PathBuf, Vec<String>)>,
}

impl Supervised {
    /// Starts `program args…` with stdout and stderr appended to `log`.
    ///
    /// # Errors
    /// The log could not be created or the program not started.
    pub fn spawn(
        name: &str,
        program: &Path,
        args: &[String],
        log: &Path,
        detach: bool,
    ) -> anyhow::Result<Supervised> {
        let mut this =
            Supervised::spawn_command(name, Command::new(program).args(args), log, detach)?;
        this.program = Some((program.to_path_buf(), args.to_vec()));
        Ok(this)
    }

    /// Stops the process ([`Supervised::stop`]) and starts the same program with the same
    /// arguments and log again, as after a power cycle.
    ///
    /// # Errors
    /// The handle came from [`Supervised::spawn_command`] (nothing to start again), or the
    /// program could not be started.
    pub fn restart(&self, grace: Duration) -> anyhow::Result<()> {
        let (program, args) = self
            .program
            .as_ref()
            .with_context(|| format!("{} was started from a prepared command", self.name))?;
        self.stop(grace);
        let again = Supervised::spawn_command(
            &self.name,
            Command::new(program).args(args),
            &self.log,
            true,
        )?;
        let child = again.child.lock().ok().and_then(|mut c| c.take());
        if let Ok(mut guard) = self.child.lock() {
            *guard = child;
        }
        Ok(())
    }

    /// Starts a prepared command (e.g. `ip netns exec NS …`) with its output appended to `log`.
    ///
    /// # Errors
    /// The log could not be created or the program not started.
    pub fn spawn_command(
        name: &str,
        cmd: &mut Command,
        log: &Path,
        detach: bool,
    ) -> anyhow::Result<Supervised> {
        let out = File::options()
            .create(true)
            .append(true)
            .open(log)
            .with_context(|| format!("creating {}", log.display()))?;
        let err = out.try_clone()?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .with_context(|| format!("starting {name}"))?;
        Ok(Supervised {
            name: name.to_owned(),
            child: Mutex::new(Some(child)),
            log: log.to_path_buf(),
            detach,
            program: None,
        })
    }

    /// The process id, if still owned.
    pub fn pid(&self) -> Option<u32> {
        self.child.lock().ok()?.as_ref().map(Child::id)
    }

    /// `Some(status)` once the process has exited.
    pub fn exit_status(&self) -> Option<ExitStatus> {
        let mut guard = self.child.lock().ok()?;
        guard.as_mut()?.try_wait().ok().flatten()
    }

    /// The last `lines` lines of the log.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Path of the log file.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// Sends `signal` (e.g. `"TERM"`, `"KILL"`) without waiting.
    pub fn signal(&self, signal: &str) {
        if let Some(pid) = self.pid() {
            let _ = Command::new("kill")
                .arg(format!("-{signal}"))
                .arg(pid.to_string())
                .status();
        }
    }

    /// Stops the process: SIGTERM, then SIGKILL if it is still running after `grace`.
    pub fn stop(&self, grace: Duration) {
        let Ok(mut guard) = self.child.lock() else {
            return;
        };
        let Some(mut child) = guard.take() else {
            return;
        };
        if child.try_wait().ok().flatten().is_none() {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(child.id().to_string())
                .status();
            let deadline = Instant::now() + grace;
            while Instant::now() < deadline {
                if child.try_wait().ok().flatten().is_some() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
        }
        let _ = child.wait();
        tracing::debug!(name = %self.name, "stopped");
    }
}

impl Drop for Supervised {
    fn drop(&mut self) {
        if !self.detach {
            self.stop(Duration::from_secs(5));
        }
    }
}
