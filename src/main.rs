//! The meshdns binary: configuration from the environment, logging, the runtime, and exit codes
//! (0 after a clean shutdown, 64 for bad configuration or a refused `dns-change`, 71 when a
//! socket cannot be bound), for both serving modes: the DNS server, and `meshdns webhook` (the
//! injection webhook).
//!
//! It owns the command line and the exit codes. It reads the process environment (with the
//! `--env-file` files laid over it) into pairs and parses none of them: the configuration does.
//! It binds the DNS and admin sockets through the library's `bind` functions, and the
//! webhook's HTTPS listener, and loads the webhook's certificate, itself.

#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use meshdns::{
    Config, ConfigError, Errors, Platform, ServerTls, ServerTlsFiles, WebhookConfig, process,
    read_env_file, render_check,
};

const EXIT_CONFIG: u8 = 64;
const EXIT_BIND: u8 = 71;
const USAGE: &str = "usage: meshdns [webhook] [--check [--resolve] [--env-file FILE]... | dns-change --platform PLATFORM --resolver IP [--current FILE] [--env-file FILE]... | --version | --help]  (configured by MESHDNS_* environment variables; meshdns --help lists them)";

/// How long the exit waits for blocking work still running (a reload reading a hung mount):
/// the queries are drained by then, and such a read must not hold the pod's shutdown.
const BLOCKING_GRACE: Duration = Duration::from_secs(1);

/// The process environment with the `--env-file` files laid over it, in order.
fn environment(env_files: &[String]) -> Result<Vec<(String, String)>, ConfigError> {
    let mut vars: BTreeMap<String, String> = std::env::vars().collect();
    for file in env_files {
        vars.extend(read_env_file(Path::new(file))?);
    }
    Ok(vars.into_iter().collect())
}

/// What the command line asks for.
enum Mode {
    Serve,
    /// `--check`: print the configuration; `resolve` asks the upstreams for host-name endpoints.
    Check {
        resolve: bool,
        env_files: Vec<String>,
    },
    /// `dns-change`: print the platform's cluster-DNS change for meshdns's zones.
    DnsChange {
        platform: Platform,
        resolver: IpAddr,
        current: Option<String>,
        env_files: Vec<String>,
    },
    /// `webhook`: serve the injection webhook; `check`: print its configuration instead.
    Webhook {
        check: bool,
    },
}

/// The arguments after `dns-change`; `None` when they are not a valid request.
fn dns_change_mode(rest: &[&str]) -> Option<Mode> {
    let (mut platform, mut resolver, mut current, mut env_files) = (None, None, None, Vec::new());
    let mut rest = rest.iter();
    while let Some(arg) = rest.next() {
        let value = rest.next()?;
        match *arg {
            "--platform" => match Platform::parse(value) {
                Ok(p) => platform = Some(p),
                Err(error) => {
                    eprintln!("meshdns: dns-change: {error}");
                    return None;
                }
            },
            "--resolver" => resolver = Some(value.parse().ok()?),
            "--current" => current = Some(value.to_string()),
            "--env-file" => env_files.push(value.to_string()),
            _ => return None,
        }
    }
    Some(Mode::DnsChange {
        platform: platform?,
        resolver: resolver?,
        current,
        env_files,
    })
}

/// The command line after the program name; `Err` is the exit of `--version`, `--help` or a
/// usage error.
fn mode(args: &[String]) -> Result<Mode, ExitCode> {
    let usage = || {
        eprintln!("{USAGE}");
        ExitCode::from(EXIT_CONFIG)
    };
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match args.as_slice() {
        [] => Ok(Mode::Serve),
        ["webhook"] => Ok(Mode::Webhook { check: false }),
        ["webhook", "--check"] => Ok(Mode::Webhook { check: true }),
        ["--check", rest @ ..] => {
            let (mut resolve, mut env_files) = (false, Vec::new());
            let mut rest = rest.iter();
            while let Some(arg) = rest.next() {
                match *arg {
                    "--resolve" => resolve = true,
                    "--env-file" => env_files.push(rest.next().ok_or_else(usage)?.to_string()),
                    _ => return Err(usage()),
                }
            }
            Ok(Mode::Check { resolve, env_files })
        }
        ["dns-change", rest @ ..] => dns_change_mode(rest).ok_or_else(usage),
        ["--version"] => {
            println!("meshdns {}", env!("CARGO_PKG_VERSION"));
            Err(ExitCode::SUCCESS)
        }
        ["--help" | "-h"] => {
            print!("{}", meshdns::help());
            Err(ExitCode::SUCCESS)
        }
        _ => Err(usage()),
    }
}

/// `meshdns dns-change`: the change on stdout, or the reason on stderr and exit 64.
fn print_dns_change(
    config: &Config,
    platform: Platform,
    resolver: IpAddr,
    current: Option<&str>,
) -> ExitCode {
    let current = match current.map(std::fs::read_to_string).transpose() {
        Ok(text) => text,
        Err(error) => {
            eprintln!("meshdns: dns-change: --current: {error}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    match meshdns::cluster_dns_change(config, platform, resolver, current.as_deref()) {
        Ok(change) => {
            print!("{change}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("meshdns: dns-change: {error}");
            ExitCode::from(EXIT_CONFIG)
        }
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mode = match mode(&args) {
        Ok(mode) => mode,
        Err(exit) => return exit,
    };
    let env_files: &[String] = match &mode {
        Mode::Check { env_files, .. } | Mode::DnsChange { env_files, .. } => env_files,
        Mode::Webhook { check } => return webhook(*check),
        Mode::Serve => &[],
    };
    let config = match environment(env_files)
        .map_err(Errors::from)
        .and_then(Config::from_vars)
    {
        Ok(config) => config,
        Err(errors) => return bad_configuration(&errors),
    };
    if let Mode::DnsChange {
        platform,
        resolver,
        current,
        ..
    } = &mode
    {
        return print_dns_change(&config, *platform, *resolver, current.as_deref());
    }
    if let Mode::Check { resolve, .. } = mode {
        // A plain --check sends nothing; --resolve asks the configured upstreams.
        let resolved = resolve.then(|| process::resolve_endpoint_names(&config));
        print!("{}", render_check(&config, resolved.as_ref()));
        return ExitCode::SUCCESS;
    }
    // Kept until the end: dropping it waits (briefly) for the last log lines to be written.
    let logs = process::init_logging(&config.log, config.log_format);
    let bound = meshdns::bind_spread(&config.listen, config.threads).and_then(|mut listeners| {
        if let Some(addr) = config.admin_listen {
            listeners.admin = Some(meshdns::bind_admin(addr)?);
        }
        if let Some(dot) = &config.dot {
            listeners.dot = meshdns::bind_dot(&dot.listen)?;
        }
        Ok(listeners)
    });
    let listeners = match bound {
        Ok(listeners) => listeners,
        Err(error) => return bind_failed(&error),
    };
    let threads = config.threads;
    let served = meshdns::run(config, listeners, process::shutdown_signal());
    serve(threads, logs, served)
}

/// Runs `served` on a runtime of `threads` threads to its end, then waits briefly for blocking
/// work and for the last log lines (`logs`).
fn serve(
    threads: usize,
    logs: Option<process::Flush>,
    served: impl std::future::Future<Output = std::io::Result<()>>,
) -> ExitCode {
    let runtime = match process::runtime(threads) {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("meshdns: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let served = runtime.block_on(served);
    runtime.shutdown_timeout(BLOCKING_GRACE);
    drop(logs);
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("meshdns: {error}");
            ExitCode::FAILURE
        }
    }
}

/// `meshdns webhook`: the configuration, the certificate, the sockets, then the server until
/// SIGTERM; with `check`, the configuration printed instead.
fn webhook(check: bool) -> ExitCode {
    let config = match WebhookConfig::from_vars(std::env::vars()) {
        Ok(config) => config,
        Err(errors) => return bad_configuration(&errors),
    };
    if check {
        print!("{}", config.render());
        return ExitCode::SUCCESS;
    }
    let logs = process::init_logging(&config.log, config.log_format);
    let files = ServerTlsFiles {
        cert: config.cert_file.clone(),
        key: config.key_file.clone(),
        client_ca: None,
    };
    let tls = match ServerTls::load(files, vec![b"http/1.1".to_vec()]) {
        Ok(tls) => std::sync::Arc::new(tls),
        Err(error) => {
            eprintln!("meshdns: bad configuration: the webhook's certificate: {error}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let bound = meshdns::bind_webhook(config.listen).and_then(|listener| {
        let admin = config.admin_listen.map(meshdns::bind_admin).transpose()?;
        Ok((listener, admin))
    });
    let (listener, admin) = match bound {
        Ok(bound) => bound,
        Err(error) => return bind_failed(&error),
    };
    let served = meshdns::run_webhook(config, listener, admin, tls, process::shutdown_signal());
    serve(1, logs, served)
}

/// Every error of a refused configuration, one line each; exit 64.
fn bad_configuration(errors: &Errors) -> ExitCode {
    for error in errors {
        eprintln!("meshdns: bad configuration: {error}");
    }
    ExitCode::from(EXIT_CONFIG)
}

/// A socket that cannot be bound, named with its variable and what to do; exit 71.
fn bind_failed(error: &meshdns::BindError) -> ExitCode {
    eprintln!("meshdns: {error}: {}", error.hint());
    ExitCode::from(EXIT_BIND)
}
