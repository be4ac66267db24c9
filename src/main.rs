//! The meshdns binary: configuration from the environment, logging, the runtime, and exit codes
//! (0 after a clean shutdown, 64 for bad configuration, 71 when a socket cannot be bound).

#![forbid(unsafe_code)]

use std::process::ExitCode;

use meshdns::config::{Config, render_check, variables};
use meshdns::process;

const EXIT_CONFIG: u8 = 64;
const EXIT_BIND: u8 = 71;
const USAGE: &str = "usage: meshdns [--check | --version | --help]  (configured by MESHDNS_* environment variables; meshdns --help lists them)";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let check = match args.as_slice() {
        [] => false,
        ["--check"] => true,
        ["--version"] => {
            println!("meshdns {}", env!("CARGO_PKG_VERSION"));
            return ExitCode::SUCCESS;
        }
        ["--help" | "-h"] => {
            print!("{}", variables::help());
            return ExitCode::SUCCESS;
        }
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let config = match Config::from_env() {
        Ok(config) => config,
        Err(error) => {
            eprintln!("meshdns: bad configuration: {error}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    if check {
        let resolved = process::resolve_endpoint_names(&config);
        print!("{}", render_check(&config, &resolved));
        return ExitCode::SUCCESS;
    }
    // Kept until the end: dropping it waits (briefly) for the last log lines to be written.
    let logs = process::init_logging(&config);
    let bound = meshdns::server::bind(&config.listen).and_then(|mut listeners| {
        if let Some(addr) = config.admin_listen {
            listeners.admin = Some(meshdns::server::bind_admin(addr)?);
        }
        Ok(listeners)
    });
    let listeners = match bound {
        Ok(listeners) => listeners,
        Err(error) => {
            eprintln!("meshdns: {error}: {}", error.hint());
            return ExitCode::from(EXIT_BIND);
        }
    };
    let runtime = match process::runtime(config.threads) {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("meshdns: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let ended = runtime.block_on(meshdns::run(config, listeners, process::shutdown_signal()));
    drop(logs);
    match ended {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("meshdns: {error}");
            ExitCode::FAILURE
        }
    }
}
