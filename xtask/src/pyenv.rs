//! Python virtual environments the tasks need (llama-cpp-python, schemathesis), built once per
//! machine into the cache folder shared by every checkout and reused while their completion
//! marker is there (a build that was cut off starts again from scratch).

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use crate::run;

/// `$XDG_CACHE_HOME/simtree`, else `~/.cache/simtree`.
pub fn cache_dir() -> Result<PathBuf, String> {
    if let Some(x) = std::env::var_os("XDG_CACHE_HOME").filter(|x| !x.is_empty()) {
        return Ok(PathBuf::from(x).join("simtree"));
    }
    let home = std::env::var_os("HOME").ok_or("neither XDG_CACHE_HOME nor HOME is set")?;
    Ok(PathBuf::from(home).join(".cache/simtree"))
}

/// The python of `<cache>/<name>`, a venv with `requirement` installed (with `env` set for pip)
/// and `import <module>` working. Built when its marker is missing.
pub fn cached_venv(name: &str, requirement: &str, env: &[(&str, &str)], module: &str) -> Result<PathBuf, String> {
    let cache = cache_dir()?;
    let venv = cache.join(name);
    let python = venv.join("bin/python");
    let done = venv.join(".complete");
    if done.exists() {
        return Ok(python);
    }
    let started = Instant::now();
    eprintln!("xtask: installing {requirement} into {} (once per machine)", venv.display());
    let _ = std::fs::remove_dir_all(&venv);
    std::fs::create_dir_all(&cache).map_err(|e| format!("{}: {e}", cache.display()))?;
    let mut mk = Command::new("python3");
    mk.args(["-m", "venv"]).arg(&venv);
    run(mk)?;
    let mut pip = Command::new(&python);
    // --no-cache-dir: pip's wheel cache is keyed by the sdist alone, so it could hand back a
    // wheel built earlier with other flags.
    pip.args(["-m", "pip", "install", "-q", "--no-cache-dir", requirement]).envs(env.iter().copied());
    run(pip)?;
    let mut check = Command::new(&python);
    check.args(["-c", &format!("import {module}")]);
    run(check)?;
    std::fs::write(&done, requirement).map_err(|e| format!("{}: {e}", done.display()))?;
    eprintln!("xtask: {requirement} ready in {:.0?}", started.elapsed());
    Ok(python)
}
