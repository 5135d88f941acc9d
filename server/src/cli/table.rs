//! `simtree table`: a long-format table of a running server's sweep or subtree, every page of
//! `GET …/sweep/{id}/table` or `GET …/node/{n}/table`, written to a file or stdout.
//!
//! It asks a server rather than opening a data folder: sweeps run in a server, the data folder
//! is that server's while it runs, and the table is then made by one piece of code for every
//! client, this one included.

use std::io::Write;

use super::*;

#[derive(Debug, clap::Args)]
pub(crate) struct TableArgs {
    /// The tree.
    tree: u64,
    /// A sweep of the tree: one row per run, step and variable.
    #[arg(long, conflicts_with_all = ["node", "path"])]
    sweep: Option<u64>,
    /// Without a sweep: the log around this node, one row per entry (default: the root, so the
    /// whole tree).
    #[arg(long)]
    node: Option<u64>,
    /// Only the node's root path (its full log), not its subtree.
    #[arg(long)]
    path: bool,
    /// A sweep's metric rows only, without each run's steps.
    #[arg(long)]
    no_series: bool,
    /// csv (a header line, then a line per row) or ndjson (a JSON object per line).
    #[arg(long, default_value = "csv", value_parser = ["csv", "ndjson"])]
    format: String,
    /// Write to this file instead of stdout.
    #[arg(long, short)]
    out: Option<PathBuf>,
    /// The server: the address or the link `simtree serve` printed (with `?token=`).
    #[arg(long, env = "SIMTREE_URL", default_value = "http://127.0.0.1:8090")]
    url: String,
    /// The server's access token, if it has one and the URL does not carry it.
    #[arg(long, env = "SIMTREE_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Rows per request.
    #[arg(long, default_value_t = crate::workbench::table::MAX_TABLE_ROWS)]
    page: u64,
}

/// Writes every page of the table.
pub(super) fn table(args: TableArgs) -> Result<(), String> {
    let mut base = reqwest::Url::parse(&args.url).map_err(|e| format!("--url {}: {e}", args.url))?;
    let token =
        args.token.clone().or_else(|| base.query_pairs().find(|(k, _)| k == "token").map(|(_, v)| v.into_owned()));
    base.set_query(None);
    let route = match args.sweep {
        Some(sweep) => format!("devui/simtree/{}/sweep/{sweep}/table", args.tree),
        None => format!("devui/simtree/{}/node/{}/table", args.tree, args.node.unwrap_or(0)),
    };
    let url = base.join(&route).map_err(|e| format!("--url {}: {e}", args.url))?;
    let mut out: Box<dyn Write> = match &args.out {
        Some(path) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?,
        )),
        None => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
    };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
    rt.block_on(async {
        let client = reqwest::Client::new();
        let mut offset = Some(0u64);
        let mut first = true;
        while let Some(at) = offset {
            let mut query =
                vec![("format", args.format.clone()), ("offset", at.to_string()), ("limit", args.page.to_string())];
            match args.sweep {
                Some(_) => query.push(("series", (!args.no_series).to_string())),
                None => query.push(("scope", if args.path { "path" } else { "subtree" }.to_string())),
            }
            let mut req = client.get(url.clone()).query(&query);
            if let Some(t) = &token {
                req = req.bearer_auth(t);
            }
            let mut res = req.send().await.map_err(|e| format!("{url}: {e}"))?;
            if !res.status().is_success() {
                let status = res.status();
                let body: Value = res.json().await.unwrap_or(Value::Null);
                let detail = body["detail"].as_str().unwrap_or("no detail").to_string();
                return Err(format!("{url}: {status}: {detail}"));
            }
            offset = res.headers().get("x-next-offset").and_then(|v| v.to_str().ok()?.parse().ok());
            // A CSV page after the first repeats the header line: leave it out.
            let mut skip_header = !first && args.format == "csv";
            first = false;
            while let Some(chunk) = res.chunk().await.map_err(|e| format!("{url}: the page broke off: {e}"))? {
                let mut bytes = &chunk[..];
                if skip_header {
                    match bytes.iter().position(|&b| b == b'\n') {
                        Some(i) => {
                            bytes = &bytes[i + 1..];
                            skip_header = false;
                        }
                        None => continue,
                    }
                }
                out.write_all(bytes).map_err(|e| e.to_string())?;
            }
        }
        out.flush().map_err(|e| e.to_string())
    })
}
