//! The binary carries what it needs: copied out of the build tree and started from an empty
//! folder, with the checkout hidden (a bubblewrap mount namespace lays an empty tmpfs over it),
//! `simtree serve` still serves the web UI, lists the shipped scenarios of all three kinds and
//! runs one.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde_json::{Value, json};

struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn a_copied_binary_serves_the_ui_and_the_shipped_scenarios_with_the_checkout_out_of_reach() {
    let checkout = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").canonicalize().unwrap();
    let built_with_ui = checkout.join("frontend/dist/index.html").is_file();
    let place = std::env::temp_dir().join(format!("simtree-copied-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&place);
    std::fs::create_dir_all(place.join("home")).unwrap();
    std::fs::create_dir_all(place.join("empty")).unwrap();
    let bin = place.join("simtree");
    std::fs::copy(simtree_e2e::simtree_bin(), &bin).unwrap();
    let child = Command::new("bwrap")
        .args(["--dev-bind", "/", "/", "--tmpfs"])
        .arg(&checkout)
        .arg("--chdir")
        .arg(place.join("empty"))
        .arg("--die-with-parent")
        .arg(&bin)
        .args(["serve", "--addr", "127.0.0.1:0"])
        .env("HOME", place.join("home"))
        .env("RUST_LOG", "warn")
        .env_remove("SIMTREE_ASSETS")
        .env_remove("SIMTREE_STATIC")
        .env_remove("SIMTREE_CACHE")
        .env_remove("XDG_CACHE_HOME")
        .stdout(Stdio::piped())
        .spawn()
        .expect("bwrap (installed by cargo xtask test)");
    let mut child = Killed(child);
    let mut line = String::new();
    BufReader::new(child.0.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let addr = simtree_e2e::listening_address(&line);
    assert!(!addr.is_empty(), "no listening line: {line:?}");
    let base = format!("http://{addr}");
    let http = reqwest::Client::new();

    let scenarios: Value = http.get(format!("{base}/api/scenarios")).send().await.unwrap().json().await.unwrap();
    let ids: Vec<&str> = scenarios.as_array().unwrap().iter().filter_map(|s| s["id"].as_str()).collect();
    for id in ["simple_chat", "werewolf", "momentum_tech", "sir_network"] {
        assert!(ids.contains(&id), "{id} missing from {ids:?}");
    }
    // Assets really come from the embedded copy: a trading episode needs the market data.
    for scenario in ["simple_chat", "momentum_tech"] {
        let tree: Value = http
            .post(format!("{base}/devui/simtree"))
            .json(&json!({"scenario": scenario}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let id = tree["id"].as_u64().unwrap_or_else(|| panic!("{scenario}: {tree}"));
        let r = http
            .post(format!("{base}/devui/simtree/{id}/advance"))
            .json(&json!({"parent": 0, "turns": 2}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{scenario}");
    }
    let page = http.get(format!("{base}/simtree/0")).send().await.unwrap();
    if built_with_ui {
        assert_eq!(page.status(), 200);
        // The page has the browser fetch the wasm and this tree's graph as its answer arrives.
        let link = page.headers()["link"].to_str().unwrap().to_string();
        assert!(
            link.contains("</simtree_frontend_bg.wasm>; rel=preload; as=fetch; crossorigin")
                && link.contains("</devui/simtree/0/graph/columns>; rel=preload; as=fetch; crossorigin"),
            "{link}"
        );
        let html = page.text().await.unwrap();
        assert!(html.contains("<html"), "{html}");
        let wasm = http
            .get(format!("{base}/simtree_frontend_bg.wasm"))
            .header("Accept-Encoding", "gzip")
            .send()
            .await
            .unwrap();
        assert_eq!(wasm.status(), 200);
        assert!(wasm.headers().get("link").is_none(), "only pages carry the preload links");
        assert_eq!(wasm.headers()["content-encoding"], "gzip", "static files are compressed");
    }
    drop(child);
    let _ = std::fs::remove_dir_all(&place);
}
