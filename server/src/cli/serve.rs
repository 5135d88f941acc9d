//! `simtree serve`: its flags (limits, access, storage, the job queue), checked and turned into
//! the plan that [`crate::fleet::serve`] leads or follows the database with.

use super::*;

/// The options of `simtree serve`.
#[derive(Debug, clap::Args)]
pub(crate) struct ServeArgs {
    /// Address to listen on (port 0 picks a free port; the bound address is printed).
    #[arg(long, default_value = "127.0.0.1:8090")]
    addr: std::net::SocketAddr,
    /// Largest accepted request body in bytes.
    #[arg(long, default_value_t = Limits::default().max_body_bytes)]
    max_body_bytes: usize,
    /// Most turns one request may run.
    #[arg(long, default_value_t = Limits::default().max_turns_per_request)]
    max_turns: u64,
    /// Most children one fan-out request may create.
    #[arg(long, default_value_t = Limits::default().max_children_per_request)]
    max_children: u64,
    /// Most trees the server holds at once.
    #[arg(long, default_value_t = Limits::default().max_trees)]
    max_trees: usize,
    /// Messages a tree socket's watcher may fall behind before it gets a resync (a node socket
    /// never resyncs: it reads what its watcher missed from the node's log).
    #[arg(long, default_value_t = Limits::default().ws_queue)]
    ws_queue: usize,
    /// The web UI's build folder (default: $SIMTREE_STATIC or the checkout's frontend/dist).
    #[arg(long)]
    static_dir: Option<PathBuf>,
    /// LLM settings file (TOML or JSON) layered over the LLM_* environment variables.
    #[arg(long)]
    llm_config: Option<PathBuf>,
    /// Default token budget of every new tree (real providers only; default unlimited).
    #[arg(long)]
    token_budget: Option<u64>,
    /// Provider calls every tree may make (real providers only; default unlimited).
    #[arg(long)]
    call_budget: Option<u64>,
    /// US dollars every tree may spend on priced models, never exceeded (default unlimited;
    /// see docs/providers.md).
    #[arg(long, value_parser = money_arg)]
    money_budget: Option<f64>,
    /// A price table (JSON: model → {prompt, completion} dollars per million tokens) added
    /// to the defaults for well-known models.
    #[arg(long, env = "SIMTREE_PRICES")]
    prices: Option<PathBuf>,
    /// Access token every route but /health requires (Bearer header, cookie or ?token=).
    /// Required when binding a non-loopback address.
    #[arg(long, env = "SIMTREE_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Another origin (scheme://host[:port]) allowed to call the API and open its sockets,
    /// e.g. a dev server of another client. Repeatable. The server's own origin always is.
    #[arg(long = "allow-origin", value_name = "URL")]
    allow_origin: Vec<String>,
    /// An origin (scheme://host[:port]) whose pages may show the web UI in a frame, e.g. a
    /// Jupyter server for `tree.show()`. Repeatable. By default no page may (clickjacking).
    #[arg(long = "allow-framing", value_name = "URL")]
    allow_framing: Vec<String>,
    /// Most nodes one tree may hold.
    #[arg(long, default_value_t = Limits::default().max_nodes_per_tree)]
    max_nodes_per_tree: usize,
    /// Resident memory (MiB) above which new runs are refused and running ones stopped
    /// (0: no budget).
    #[arg(long, default_value_t = Limits::default().max_memory_bytes >> 20)]
    max_memory_mb: u64,
    /// Connections held at once; to make room, the oldest silent one is closed, then a slow
    /// body of the address with the most; one remote address holds at most a quarter, and
    /// /health and /ready are answered beyond it.
    #[arg(long, default_value_t = Limits::default().max_connections)]
    max_connections: usize,
    /// WebSockets open at once; an upgrade beyond it gets 503.
    #[arg(long, default_value_t = Limits::default().max_websockets)]
    max_websockets: usize,
    /// Seconds a WebSocket client may send nothing, pongs included, before it is closed (1001,
    /// saying where to resume); a client that reads is never closed for it.
    #[arg(long, default_value_t = Limits::default().ws_idle.as_secs(), value_parser = clap::value_parser!(u64).range(3..=86_400))]
    ws_idle_secs: u64,
    /// Seconds the runs in flight may take to finish once the server is asked to stop
    /// (SIGTERM, Ctrl-C); the rest are then cancelled and stored as cancelled.
    #[arg(long, env = "SIMTREE_SHUTDOWN_GRACE_SECS",
          default_value_t = crate::http::DEFAULT_SHUTDOWN_GRACE.as_secs(),
          value_parser = clap::value_parser!(u64).range(0..=3600))]
    shutdown_grace_secs: u64,
    /// PostgreSQL: the base URL the other servers on the database reach this one at when it
    /// leads (e.g. http://10.0.0.5:8090); default http://<the bound address>. Required when
    /// binding an unspecified address (0.0.0.0, ::).
    #[arg(long, env = "SIMTREE_ADVERTISE", value_name = "URL")]
    advertise: Option<String>,
    #[command(flatten)]
    storage: StorageArgs,
    #[command(flatten)]
    jobs: ServeJobs,
}

/// `serve`'s job queue flags.
#[derive(Debug, clap::Args)]
pub(crate) struct ServeJobs {
    /// PostgreSQL: send runs through the job queue, where `simtree worker` processes (and this
    /// server, unless --no-worker) take them. The default with --database-url (the flag stays for
    /// scripts that name it); with SQLite every run stays in this process.
    #[arg(long, requires = "database_url", conflicts_with = "no_jobs")]
    jobs: bool,
    /// PostgreSQL: keep every run in this process, without the job queue (as with SQLite).
    #[arg(long)]
    no_jobs: bool,
    /// PostgreSQL: run no jobs in this process (only `simtree worker` processes do).
    #[arg(long, requires = "database_url", conflicts_with = "no_jobs")]
    no_worker: bool,
    #[command(flatten)]
    queue: QueueArgs,
}

/// `simtree serve`: the plan of the flags, then the server's life on its database (`fleet`).
pub(super) fn serve(a: ServeArgs, ground: Ground) -> Result<(), String> {
    let Ground { library, assets, sandbox } = ground;
    let ServeArgs {
        addr,
        max_body_bytes,
        max_turns,
        max_children,
        max_trees,
        ws_queue,
        static_dir,
        llm_config,
        token_budget,
        call_budget,
        money_budget,
        prices,
        token,
        allow_origin,
        allow_framing,
        max_nodes_per_tree,
        max_memory_mb,
        max_connections,
        max_websockets,
        ws_idle_secs,
        shutdown_grace_secs,
        advertise,
        storage,
        jobs,
    } = a;
    let access = access_policy(addr, token, allow_origin, allow_framing)?;
    // Checked now: a bad LLM setting stops the start, not a later takeover.
    crate::fleet::backend(llm_config.as_deref()).map_err(|e| e.to_string())?;
    let limits = Limits {
        max_body_bytes,
        max_turns_per_request: max_turns,
        max_children_per_request: max_children,
        max_trees,
        ws_queue,
        token_budget,
        call_budget,
        money_budget,
        max_nodes_per_tree,
        max_memory_bytes: max_memory_mb << 20,
        max_connections,
        cache_bytes: storage.cache_mb << 20,
        max_import_bytes: storage.max_import_bytes,
        max_websockets,
        ws_idle: std::time::Duration::from_secs(ws_idle_secs),
    };
    // Runs are jobs on PostgreSQL unless `--no-jobs`.
    let queue = match (!jobs.no_jobs, &storage.database_url) {
        (true, Some(url)) => Some(jobs.queue.config(url)),
        _ => None,
    };
    // The server's own worker: a workbench of its own that reads trees from the store
    // as jobs name them, like `simtree worker` — on a leader and a follower alike.
    let own_worker = match &queue {
        Some(config) if !jobs.no_worker => Some((
            crate::fleet::worker_bench(&library, &assets, sandbox, llm_config.as_deref(), &config.url)
                .map_err(|e| e.to_string())?,
            config.clone(),
        )),
        _ => None,
    };
    let static_dir = static_dir.unwrap_or_else(crate::http::default_static_dir);
    if !static_dir.join("index.html").exists() {
        eprintln!(
            "simtree: no web UI in {} (build it with `cargo xtask dist`); serving the API only",
            static_dir.display()
        );
    }
    let plan = Arc::new(LeaderPlan {
        library,
        assets,
        sandbox,
        llm_config,
        prices,
        limits,
        storage: storage.site()?,
        queue,
        static_dir,
        access: Arc::new(access),
        shutdown_grace: std::time::Duration::from_secs(shutdown_grace_secs),
    });
    let rt = runtime()?;
    rt.block_on(crate::fleet::serve(plan, addr, advertise, own_worker)).map_err(|e| e.to_string())
}

/// The access policy of `serve`: a non-loopback address needs a token (anyone on the network
/// could otherwise drive the server); origins must be `scheme://host[:port]`.
fn access_policy(
    addr: std::net::SocketAddr,
    token: Option<String>,
    allow_origin: Vec<String>,
    allow_framing: Vec<String>,
) -> Result<crate::http::Access, String> {
    let token = token.filter(|t| !t.is_empty());
    if !addr.ip().is_loopback() && token.is_none() {
        return Err(format!(
            "refusing to serve on {addr} without a token: anyone who can reach that address could \
             run simulations and import trees. Pass --token <secret> (or set SIMTREE_TOKEN), or bind \
             a loopback address such as 127.0.0.1"
        ));
    }
    if let Some(t) = &token
        && (t.len() < 8 || t.chars().any(|c| !c.is_ascii_graphic() || c == ';' || c == '&'))
    {
        return Err("--token must be at least 8 printable characters without ';' or '&'".into());
    }
    Ok(crate::http::Access {
        token,
        allowed_origins: origins("--allow-origin", allow_origin, "http://localhost:5173")?,
        loopback_host_only: addr.ip().is_loopback(),
        framing_origins: origins("--allow-framing", allow_framing, "http://localhost:8888")?,
    })
}

/// The origins given with `flag`, each `scheme://host[:port]` (a trailing `/` dropped); a
/// refusal shows `example`. Nothing else may reach a header: no path, space or quote.
fn origins(flag: &str, given: Vec<String>, example: &str) -> Result<Vec<String>, String> {
    given
        .into_iter()
        .map(|o| {
            let o = o.trim_end_matches('/').to_string();
            let rest = o.strip_prefix("http://").or_else(|| o.strip_prefix("https://")).unwrap_or("");
            let valid = !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_graphic() && !b"/'\";,".contains(&b));
            if valid { Ok(o) } else { Err(format!("{flag} {o}: expected scheme://host[:port], e.g. {example}")) }
        })
        .collect()
}

/// `--money-budget`: a finite, non-negative number of dollars.
fn money_arg(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!("{text:?} is not an amount of dollars (a number ≥ 0)")),
    }
}
