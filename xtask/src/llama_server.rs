//! llama.cpp's own OpenAI-compatible server, `llama-server`, for the prompt-caching bench
//! (`cargo xtask bench-llm-cache`, see `tests/benches/llm_cache.rs`).
//!
//! llama-cpp-python's server has one slot and reports no cache counts, so the bench runs
//! `llama-server`, which decodes several requests at once (slots), keeps a prompt cache in
//! memory and reports per response how many prompt tokens it evaluated (`timings.prompt_n`) and
//! reused (`timings.cache_n`). It is built from the llama.cpp tree that the llama-cpp-python sdist
//! vendors (`vendor/llama.cpp`), so the bench and the real-model tests run the same llama.cpp.
//! Only the `llama-server` target is built, statically, with the portable CPU flags of
//! `real_llm.rs` (a native build crashes on some AVX-512 machines), without HTTPS, curl or the
//! web UI (whose assets would be downloaded). cmake comes from PyPI in a venv of its own, so no
//! system cmake is needed.
//!
//! Built once per machine into `<cache>/llama-server-<version>/bin/llama-server`; the
//! `.complete` marker, written last, holds the build flags, and a marker with other flags (or
//! none: a build that was cut off) means build again. A lock file keeps two runs from building
//! at once. The sources and the build folder are removed after the build (about 200 MB).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use crate::pyenv::{cache_dir, cached_venv};
use crate::real_llm::{CMAKE_ARGS, LLAMA_CPP_PYTHON};
use crate::run;

/// cmake from PyPI, in a venv of its own.
const CMAKE: &str = "cmake==4.4.5";
/// What else the build is configured with: static, and nothing that reaches the network.
const SERVER_ARGS: &str = "-DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF \
-DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_TESTS=OFF \
-DLLAMA_BUILD_EXAMPLES=OFF";

/// The python of the cmake venv (built once), which also runs pip for the downloads.
fn cmake_python() -> Result<PathBuf, String> {
    cached_venv(&format!("venv-{}", CMAKE.replace("==", "-")), CMAKE, &[], "cmake")
}

fn folder() -> Result<PathBuf, String> {
    Ok(cache_dir()?.join(format!("llama-server-{LLAMA_CPP_PYTHON}")))
}

/// What the marker holds: every flag the binary was built with.
fn flags() -> String {
    format!("{CMAKE_ARGS} {SERVER_ARGS}")
}

/// The server binary when it is already built with today's flags.
pub fn cached() -> Option<PathBuf> {
    let dir = folder().ok()?;
    let marker = std::fs::read_to_string(dir.join(".complete")).ok()?;
    (marker == flags()).then(|| dir.join("bin/llama-server"))
}

/// The server binary, built first when missing (20–40 minutes on two cores). Prints how long
/// the build took.
pub fn prepare() -> Result<PathBuf, String> {
    if let Some(bin) = cached() {
        return Ok(bin);
    }
    let dir = folder()?;
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    // Beside the folder (`llama-server-0.3.36.lock`), which may be removed and built again.
    let lock_path = dir.with_file_name(format!("llama-server-{LLAMA_CPP_PYTHON}.lock"));
    let lock = File::create(&lock_path).map_err(|e| format!("{}: {e}", lock_path.display()))?;
    eprintln!("xtask: waiting for the lock {}", lock_path.display());
    lock.lock().map_err(|e| format!("{}: {e}", lock_path.display()))?;
    // Another run may have built it while this one waited.
    if let Some(bin) = cached() {
        return Ok(bin);
    }
    let started = Instant::now();
    let python = cmake_python()?;
    let cmake = python.with_file_name("cmake");
    let src = dir.join("src");
    if !src.join("CMakeLists.txt").exists() {
        unpack_sources(&python, &dir, &src)?;
    }
    let build = dir.join("build");
    let mut configure = Command::new(&cmake);
    configure.arg("-S").arg(&src).arg("-B").arg(&build).args(flags().split_whitespace());
    run(configure)?;
    let mut make = Command::new(&cmake);
    make.arg("--build").arg(&build).args(["--target", "llama-server", "-j", "2"]);
    run(make)?;
    let bin = dir.join("bin/llama-server");
    std::fs::create_dir_all(dir.join("bin")).map_err(|e| format!("{}: {e}", dir.display()))?;
    std::fs::copy(build.join("bin/llama-server"), &bin).map_err(|e| format!("{}: {e}", bin.display()))?;
    let mut version = Command::new(&bin);
    version.arg("--version");
    run(version)?;
    let _ = std::fs::remove_dir_all(&build);
    let _ = std::fs::remove_dir_all(&src);
    let marker = dir.join(".complete");
    std::fs::write(&marker, flags()).map_err(|e| format!("{}: {e}", marker.display()))?;
    eprintln!("xtask: llama-server built in {:.0?}", started.elapsed());
    Ok(bin)
}

/// Downloads the llama-cpp-python sdist (with pip, no dependencies) and unpacks its
/// `vendor/llama.cpp` into `src`.
fn unpack_sources(python: &Path, dir: &Path, src: &Path) -> Result<(), String> {
    let wheels = cache_dir()?.join("wheels");
    let mut dl = Command::new(python);
    dl.args(["-m", "pip", "download", "-q", "--no-deps", "--no-binary", "llama-cpp-python", "-d"])
        .arg(&wheels)
        .arg(format!("llama-cpp-python=={LLAMA_CPP_PYTHON}"));
    run(dl)?;
    let _ = std::fs::remove_dir_all(src);
    std::fs::create_dir_all(src).map_err(|e| format!("{}: {e}", src.display()))?;
    let sdist = wheels.join(format!("llama_cpp_python-{LLAMA_CPP_PYTHON}.tar.gz"));
    let mut tar = Command::new("tar");
    tar.arg("xzf")
        .arg(&sdist)
        .args(["--strip-components=3", "-C"])
        .arg(src)
        .arg(format!("llama_cpp_python-{LLAMA_CPP_PYTHON}/vendor/llama.cpp"))
        .current_dir(dir);
    run(tar)
}

/// Builds what the bench needs when missing (the server, the model, the debug `simtree` the
/// bench starts) and runs it. The bench binary is built in the dev profile: it only drives
/// servers, and a release build of the server crate for it would cost more than the bench.
pub fn bench() -> Result<(), String> {
    let server = prepare()?;
    let model = crate::real_llm::model(&cmake_python()?)?;
    run_bench(&server, &model)
}

/// The bench with a server and model already cached; `None` when either is missing (then
/// `cargo xtask bench` says how to opt in).
pub fn bench_if_cached() -> Option<Result<(), String>> {
    let server = cached()?;
    let model = crate::real_llm::model_path().ok().filter(|m| m.exists())?;
    Some(run_bench(&server, &model))
}

fn run_bench(server: &Path, model: &Path) -> Result<(), String> {
    let mut build = crate::cargo();
    build.args(["build", "-p", "simtree-server", "--bin", "simtree"]);
    run(build)?;
    let mut bench = crate::cargo();
    bench
        .args(["bench", "--profile", "dev", "-p", "simtree-e2e", "--bench", "llm_cache"])
        .env("SIMTREE_LLAMA_SERVER", server)
        .env("SIMTREE_REAL_LLM_MODEL", model);
    run(bench)
}
