//! The Python client's tests (`clients/python`): pytest against the real binary, in a venv of the
//! cache folder that holds the client's dependencies and its test extras from PyPI. The venv is
//! named after a hash of the client's `pyproject.toml`, so it is built once per machine and again
//! only when the dependencies change; the tests import the checkout's sources
//! (`PYTHONPATH=clients/python/src`), so an edit needs no reinstall.

use std::process::Command;

use crate::pyenv::cached_venv;
use crate::{root, run, target_dir};

/// FNV-1a: a hash that stays the same across Rust versions, to name the venv.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3))
}

pub fn test() -> Result<(), String> {
    let package = root().join("clients/python");
    let pyproject = std::fs::read(package.join("pyproject.toml"))
        .map_err(|e| format!("{}: {e}", package.join("pyproject.toml").display()))?;
    let name = format!("venv-pyclient-{:016x}", fnv1a(&pyproject));
    // Installing the package itself (not only its dependencies) checks that one pip command
    // from the checkout installs it.
    let requirement = format!("{}[test]", package.display());
    let python = cached_venv(&name, &requirement, &[], "simtree_client")?;
    let mut pytest = Command::new(python);
    pytest
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"])
        .current_dir(&package)
        .env("PYTHONPATH", package.join("src"))
        .env("SIMTREE_BIN", target_dir().join("debug/simtree"));
    run(pytest)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_venv_name_follows_the_pyproject() {
        assert_eq!(super::fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(super::fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_ne!(super::fnv1a(b"httpx>=0.27"), super::fnv1a(b"httpx>=0.28"));
    }
}
