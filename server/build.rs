//! Copies the web UI's build (`frontend/dist`, made by `cargo xtask dist`) into `OUT_DIR` so the
//! binary can embed it (`embedded.rs`) whether or not it has been built: without it the binary
//! embeds an empty UI and serves the API only. Assets are embedded straight from `assets/`.

use std::path::{Path, PathBuf};

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
}
