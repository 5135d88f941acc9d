//! The worker's Python environment: `.venv-abm/` at the project root, created with
//! `python3 -m venv` and filled from `assets/python/requirements.txt` (Mesa 3.x pinned, networkx).
//!
//! [`ensure_venv`] is idempotent: it does nothing when the venv exists and was installed from the
//! current requirements (a copy of the file is kept inside the venv as the marker), and
//! reinstalls when the requirements changed. `cargo xtask` calls it before running or testing;
//! the first install downloads about 350 MB (numpy, pandas, scipy come with Mesa).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// The venv's folder name, under the project root (gitignored).
pub(crate) const VENV_DIR: &str = ".venv-abm";
/// The requirements file, relative to the project root.
pub(crate) const REQUIREMENTS: &str = "assets/python/requirements.txt";
/// The marker inside the venv: the requirements it was installed from.
const MARKER: &str = "simtree-requirements.txt";

/// One installation at a time within this process (tests run in parallel threads).
static INSTALL: Mutex<()> = Mutex::new(());

/// The interpreter inside a venv folder.
pub(crate) fn venv_python(venv: &Path) -> PathBuf {
    if cfg!(windows) { venv.join("Scripts").join("python.exe") } else { venv.join("bin").join("python") }
}

/// The system Python used to create the venv: `$SIMTREE_BOOTSTRAP_PYTHON`, else `python3`.
pub(crate) fn bootstrap_python() -> PathBuf {
    std::env::var_os("SIMTREE_BOOTSTRAP_PYTHON").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("python3"))
}

/// Whether a usable `python3` exists on this machine (tests skip only when it does not).
pub fn python_available() -> bool {
    Command::new(bootstrap_python()).arg("--version").output().is_ok_and(|o| o.status.success())
}

/// Why the worker's Python environment could not be made ready; each names the file or the
/// command and the step it was for.
#[derive(Debug, thiserror::Error)]
pub enum VenvError {
    #[error("cannot read {}: {source}", .path.display())]
    Read { path: PathBuf, source: std::io::Error },
    #[error("cannot write {}: {source}", .path.display())]
    Write { path: PathBuf, source: std::io::Error },
    /// A command (`python3 -m venv …`, `pip install …`) could not be started.
    #[error("cannot {what}: {command}: {source}")]
    Spawn { what: &'static str, command: String, source: std::io::Error },
    /// A command ran and failed; the last lines of what it wrote to stderr.
    #[error("cannot {what}: {command} exited with {status}:\n{stderr_tail}")]
    Failed { what: &'static str, command: String, status: std::process::ExitStatus, stderr_tail: String },
}

/// Makes sure `<root>/.venv-abm` exists with the pinned requirements installed, and returns its
/// Python interpreter.
pub fn ensure_venv(root: &Path) -> Result<PathBuf, VenvError> {
    let _guard = INSTALL.lock().unwrap_or_else(|p| p.into_inner());
    let requirements_path = root.join(REQUIREMENTS);
    let requirements = std::fs::read_to_string(&requirements_path)
        .map_err(|source| VenvError::Read { path: requirements_path.clone(), source })?;
    let venv = root.join(VENV_DIR);
    let python = venv_python(&venv);
    let marker = venv.join(MARKER);
    if python.is_file() && std::fs::read_to_string(&marker).ok().as_deref() == Some(&requirements) {
        return Ok(python);
    }
    if !python.is_file() {
        run(Command::new(bootstrap_python()).arg("-m").arg("venv").arg(&venv), "create the virtualenv")?;
    }
    run(
        Command::new(&python)
            .args(["-m", "pip", "install", "--disable-pip-version-check", "-q", "-r"])
            .arg(&requirements_path),
        "install the worker's requirements",
    )?;
    std::fs::write(&marker, &requirements).map_err(|source| VenvError::Write { path: marker, source })?;
    Ok(python)
}

fn run(cmd: &mut Command, what: &'static str) -> Result<(), VenvError> {
    let command = format!("{cmd:?}");
    let out = match cmd.output() {
        Ok(out) => out,
        Err(source) => return Err(VenvError::Spawn { what, command, source }),
    };
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let tail: Vec<&str> = stderr.lines().rev().take(15).collect();
    let tail: Vec<&str> = tail.into_iter().rev().collect();
    Err(VenvError::Failed { what, command, status: out.status, stderr_tail: tail.join("\n") })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_existing_venv_with_the_same_requirements_is_left_alone() {
        // A fake root whose "venv" has an interpreter file and an up-to-date marker: nothing may
        // run (there is no real python there, so any command would fail).
        let root = crate::testing::Scratch::new("venv-test");
        std::fs::create_dir_all(root.join("assets/python")).unwrap();
        std::fs::write(root.join(REQUIREMENTS), "mesa==3.3.1\n").unwrap();
        let python = venv_python(&root.join(VENV_DIR));
        std::fs::create_dir_all(python.parent().unwrap()).unwrap();
        std::fs::write(&python, "").unwrap();
        std::fs::write(root.join(VENV_DIR).join(MARKER), "mesa==3.3.1\n").unwrap();
        assert_eq!(ensure_venv(&root).unwrap(), python);

        // Changed requirements: it tries to reinstall, and the fake interpreter fails with a
        // message naming the step.
        std::fs::write(root.join(REQUIREMENTS), "mesa==3.3.1\nnetworkx==3.6.1\n").unwrap();
        let err = ensure_venv(&root).unwrap_err().to_string();
        assert!(err.starts_with("cannot install the worker's requirements: "), "{err}");
    }

    #[test]
    fn missing_requirements_are_reported() {
        let err = ensure_venv(Path::new("/nonexistent-simtree-root")).unwrap_err().to_string();
        assert!(err.starts_with("cannot read /nonexistent-simtree-root/assets/python/requirements.txt: "), "{err}");
    }
}
