//! Copies the web UI's build (`frontend/dist`, made by `cargo xtask dist`) into `OUT_DIR` so the
//! binary can embed it (`embedded.rs`) whether or not it has been built: without it the binary
//! embeds an empty UI and serves the API only. Assets are embedded straight from `assets/`.
//! Also sets `SIMTREE_COMMIT`, the checkout's commit (`unknown` outside a git checkout), for
//! provenance.

use std::path::{Path, PathBuf};
use std::process::Command;

/// `git rev-parse ARGS` in the crate's folder, trimmed; `None` without git or a checkout.
fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").arg("rev-parse").args(args).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string()).filter(|s| !s.is_empty())
}

/// Sets `SIMTREE_COMMIT` and reruns when the checkout moves to another commit: a change of HEAD
/// (another branch), of the branch's ref (a commit) or of `packed-refs`.
///
/// Only paths that exist are watched: cargo reruns a build script on every build while a watched
/// path is missing, which rebuilds this crate each time (a repository without `packed-refs`). A
/// branch whose ref is only packed has no file of its own yet: its folder is watched instead,
/// which sees the file appear with the branch's next commit.
fn commit() {
    let commit = git(&["--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=SIMTREE_COMMIT={commit}");
    let path = |name: &str| git(&["--git-path", name]).map(PathBuf::from);
    let mut watched: Vec<PathBuf> = ["HEAD", "packed-refs"].into_iter().filter_map(path).collect();
    if let Some(branch) = git(&["--symbolic-full-name", "HEAD"])
        && let Some(p) = path(&branch)
    {
        watched.push(if p.exists() { p } else { p.parent().map(Path::to_path_buf).unwrap_or(p) });
    }
    for p in watched.iter().filter(|p| p.exists()) {
        println!("cargo:rerun-if-changed={}", p.display());
    }
}

fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), target)?;
        }
    }
    Ok(())
}

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let dist = manifest.join("../frontend/dist");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets it")).join("dist");
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).expect("OUT_DIR is writable");
    if dist.join("index.html").is_file() {
        copy_dir(&dist, &out).expect("copy frontend/dist");
    }
    // Cargo compares the newest mtime under the folder with the script's last run, so a
    // `cargo xtask dist` that rewrites nothing (it writes only files whose bytes change) costs no
    // rebuild. A path that does not exist would make cargo rerun the script, and rebuild this
    // crate, on every build: without the UI's build, watch the folder that will hold it.
    if dist.is_dir() {
        println!("cargo:rerun-if-changed=../frontend/dist");
    } else {
        println!("cargo:rerun-if-changed=../frontend");
    }
    println!("cargo:rerun-if-changed=../assets");
    commit();
}
