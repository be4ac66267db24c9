//! Where each variable's value comes from: the process environment, overridden by the files of
//! `MESHDNS_CONFIG_DIR` — one file per variable, named after it, whose content is the value,
//! exactly as Kubernetes mounts a ConfigMap or Secret as a volume.
//!
//! Only `MESHDNS_*` names are ours. An unknown one is a typo and an error (with the variable it
//! most likely stands for), except the service-link variables Kubernetes injects for a Service
//! named `meshdns`. In the directory, hidden entries (the kubelet's `..data` and timestamped
//! directories) and files not named `MESHDNS_*` are skipped.
//!
//! [`Sources::load`] is the one loader: it reads the directory and every file the values name (the
//! resolv.conf, the hosts file, the PEM files of `MESHDNS_TLS_*` and `MESHDNS_DOT_*`) once, into
//! plain data, so that the parse ([`super::parse`]) touches nothing. It runs at startup and on the
//! reload's blocking pool, never on a thread that serves DNS (a hung mount must not stall queries).
//! It does not validate values: a file it cannot read is kept as the error, for the parse to report
//! in its turn. One file is more than bytes: the certificate of `MESHDNS_DOT_*` is built as it is
//! read ([`ServerTls::load`], which then follows its files), and its error too is kept for the
//! parse.
//!
//! No value is longer than [`MAX_VALUE`]: a file is read no further than one byte past it, and
//! a longer environment variable is refused before anything parses it, so a wrong file (or a
//! runaway template) costs neither memory nor time.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use super::variables::{
    self, Applies, CLIENT_TLS_FILES, CONFIG_DIR, DOT_CERT_FILE, DOT_CLIENT_CA_FILE, DOT_KEY_FILE,
    DOT_LISTEN, HOSTS_FILE, POD_NAMES, RESOLV_CONF, Variable,
};
use super::{ConfigError, Errors};
use super::{set, value};
use crate::certificates::server::{ServerTls, ServerTlsFiles};
use crate::certificates::{PemFile, TlsConfigError};

/// The longest value of any variable, from a file or the environment: 64 KiB holds 256
/// clusters with several endpoints and options each, and no meaningful value comes near it.
pub(super) const MAX_VALUE: usize = 64 * 1024;

/// Where a value came from (shown by `--check`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Source {
    Default,
    Environment,
    ConfigDir(PathBuf),
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Default => f.write_str("default"),
            Source::Environment => f.write_str("environment"),
            Source::ConfigDir(file) => write!(f, "configuration directory ({})", file.display()),
        }
    }
}

/// The raw values of the variables that are set, with their sources.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Settings {
    values: BTreeMap<&'static str, (String, Source)>,
}

/// What the world holds, read once by [`Sources::load`]: the parse's only input.
#[derive(Debug)]
pub(crate) struct Sources {
    /// The environment with the configuration directory's files laid over it.
    pub(crate) settings: Settings,
    /// The environment's part of `settings`: what a reload lays the directory over again.
    pub(crate) environment: Settings,
    /// `MESHDNS_RESOLV_CONF`'s path, and its content or why it cannot be read.
    pub(crate) resolv_conf: (PathBuf, std::io::Result<Vec<u8>>),
    /// `MESHDNS_HOSTS_FILE`'s content, read when a pod variable it completes is unset.
    pub(crate) hosts_file: Option<std::io::Result<String>>,
    /// The files of `MESHDNS_TLS_CA_FILE`, `MESHDNS_TLS_CERT_FILE` and `MESHDNS_TLS_KEY_FILE`
    /// ([`CLIENT_TLS_FILES`]), those that are set.
    pub(crate) tls: [Option<PemFile>; 3],
    /// The certificate DNS over TLS serves, loaded from the files of `MESHDNS_DOT_*` when the
    /// listener, the certificate and the key are set (it follows its files from then on).
    pub(crate) dot_tls: Option<Result<ServerTls, TlsConfigError>>,
}

impl Sources {
    /// Reads the configuration directory `environment` names, then every file the values name.
    /// Fails only when the directory cannot be read (or holds what is not ours).
    pub(crate) fn load(environment: &Settings) -> Result<Self, Errors> {
        let settings = match set(environment, CONFIG_DIR) {
            None => environment.clone(),
            Some(dir) => environment.clone().with_dir(Path::new(dir))?,
        };
        let resolv_conf = PathBuf::from(value(&settings, RESOLV_CONF));
        let resolv_bytes = std::fs::read(&resolv_conf);
        let pod_incomplete = POD_NAMES
            .iter()
            .any(|variable| set(&settings, variable).is_none());
        let hosts_file =
            pod_incomplete.then(|| std::fs::read_to_string(value(&settings, HOSTS_FILE)));
        let tls = CLIENT_TLS_FILES
            .map(|variable| set(&settings, variable).map(|path| PemFile::read(Path::new(path))));
        let dot_tls = dot_tls(&settings);
        Ok(Self {
            settings,
            environment: environment.clone(),
            resolv_conf: (resolv_conf, resolv_bytes),
            hosts_file,
            tls,
            dot_tls,
        })
    }
}

/// The certificate of `MESHDNS_DOT_*`, when the listener, the certificate and the key are set.
fn dot_tls(settings: &Settings) -> Option<Result<ServerTls, TlsConfigError>> {
    let file = |variable| set(settings, variable).map(PathBuf::from);
    set(settings, DOT_LISTEN)?;
    let files = ServerTlsFiles {
        cert: file(DOT_CERT_FILE)?,
        key: file(DOT_KEY_FILE)?,
        client_ca: file(DOT_CLIENT_CA_FILE),
    };
    Some(ServerTls::load(files, Vec::new()))
}

/// The content of `path`, read no further than one byte past `limit`; `variable` is what an
/// error names.
fn read_text(variable: &str, path: &Path, limit: usize) -> Result<String, ConfigError> {
    let shown = path.display().to_string();
    let unreadable = |error: std::io::Error| {
        ConfigError::new(variable, &shown, format!("cannot be read ({error})"))
    };
    let file = std::fs::File::open(path).map_err(unreadable)?;
    let mut bytes = Vec::new();
    file.take(u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(unreadable)?;
    if bytes.len() > limit {
        return Err(ConfigError::new(
            variable,
            &shown,
            format!(
                "is longer than {} KiB; is this the right file?",
                limit / 1024
            ),
        ));
    }
    String::from_utf8(bytes).map_err(|_| ConfigError::new(variable, &shown, "is not UTF-8 text"))
}

/// The `KEY=VALUE` lines of an env file (`meshdns --check --env-file`), as a ConfigMap's
/// `configMapGenerator` `envs:` and `docker run --env-file` read them: blank lines and `#`
/// comments skipped, the value everything after the first `=`, spaces included — so a
/// `MESHDNS_CLUSTERS` with spaces is checked whole, as the sidecar will read it.
pub fn read_env_file(path: &Path) -> Result<Vec<(String, String)>, ConfigError> {
    const FLAG: &str = "--env-file";
    let text = read_text(FLAG, path, MAX_VALUE * variables::VARIABLES.len())?;
    let mut pairs = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.trim_start();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (name, value) = line.split_once('=').ok_or_else(|| {
            ConfigError::new(
                FLAG,
                &format!("{}:{}", path.display(), number + 1),
                "is not a KEY=VALUE line",
            )
        })?;
        pairs.push((name.trim_end().to_string(), value.to_string()));
    }
    Ok(pairs)
}

/// The `MESHDNS_*` files of `dir`, in name order: hidden entries (the kubelet's `..data` and
/// timestamped directories) and other names are not ours.
fn files_of(dir: &Path) -> Result<Vec<(String, PathBuf)>, ConfigError> {
    let shown = dir.display().to_string();
    let unreadable = |error: std::io::Error| {
        ConfigError::new(CONFIG_DIR, &shown, format!("cannot be read ({error})"))
    };
    let mut files: Vec<(String, PathBuf)> = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(unreadable)? {
        let entry = entry.map_err(unreadable)?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || !name.starts_with("MESHDNS_") {
            continue;
        }
        files.push((name, entry.path()));
    }
    files.sort();
    Ok(files)
}

/// `MESHDNS_SERVICE_HOST`, `MESHDNS_PORT`, `MESHDNS_PORT_53_UDP_PROTO`, …: what Kubernetes
/// sets for a Service named `meshdns` (enableServiceLinks, on by default).
fn is_service_link(name: &str) -> bool {
    name == "MESHDNS_PORT"
        || name.starts_with("MESHDNS_PORT_")
        || name.starts_with("MESHDNS_SERVICE_")
}

fn unknown(name: &str) -> ConfigError {
    let reason = match variables::suggestion(name) {
        Some(meant) => format!("is not a meshdns variable (did you mean {meant}?)"),
        None => "is not a meshdns variable (meshdns --help lists them)".to_string(),
    };
    ConfigError::new(name, name, reason)
}

impl Settings {
    /// The `MESHDNS_*` variables among `vars` (other names are ignored).
    /// Every unknown name and every value too long is refused, each once.
    pub(crate) fn from_vars<I: IntoIterator<Item = (String, String)>>(
        vars: I,
    ) -> Result<Self, Errors> {
        let mut found: Vec<(String, String)> = vars
            .into_iter()
            .filter(|(name, _)| name.starts_with("MESHDNS_") && !is_service_link(name))
            .collect();
        // Report typos in name order, whatever order the environment lists them in.
        found.sort();
        let (mut settings, mut errors) = (Settings::default(), Errors::default());
        for (name, value) in found {
            let Some(variable) = variables::find(&name) else {
                errors.push(unknown(&name));
                continue;
            };
            if value.len() > MAX_VALUE {
                errors.push(ConfigError::new(
                    variable.name,
                    "(its value in the environment)",
                    format!("is longer than {} KiB", MAX_VALUE / 1024),
                ));
                continue;
            }
            settings
                .values
                .insert(variable.name, (value, Source::Environment));
        }
        errors.into_result(settings)
    }

    /// These settings with the files of `dir` laid over them; every file that is not a
    /// variable the directory may set, or cannot be read, is refused, each once.
    pub(crate) fn with_dir(mut self, dir: &Path) -> Result<Self, Errors> {
        let mut errors = Errors::default();
        for (name, path) in files_of(dir)? {
            let value = match variables::find(&name) {
                None => Err(unknown(&name)),
                Some(variable) if matches!(variable.applies, Applies::EnvironmentOnly) => {
                    Err(ConfigError::new(
                        variable.name,
                        &path.display().to_string(),
                        "can only be set in the environment",
                    ))
                }
                Some(variable) => read_text(variable.name, &path, MAX_VALUE).map(|v| (variable, v)),
            };
            match value {
                Ok((variable, value)) => {
                    // A ConfigMap value usually ends with a newline.
                    let value = value.trim_end_matches(['\n', '\r']).to_string();
                    (self.values).insert(variable.name, (value, Source::ConfigDir(path)));
                }
                Err(error) => errors.push(error),
            }
        }
        errors.into_result(self)
    }

    /// The raw value of `name`, when it is set.
    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(|(value, _)| value.as_str())
    }

    /// Where the value of `name` comes from.
    pub(crate) fn source(&self, name: &str) -> Source {
        self.values
            .get(name)
            .map_or(Source::Default, |(_, source)| source.clone())
    }

    /// The variables whose raw values differ between `self` and `other`.
    pub(crate) fn changed(&self, other: &Settings) -> Vec<&'static Variable> {
        (variables::VARIABLES.iter())
            .filter(|v| self.get(v.name) != other.get(v.name))
            .collect()
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::certificates::tests::Scratch;
    use crate::config::tests::one_error;

    /// `NAME=value` pairs as the environment gives them.
    pub(in crate::config) fn vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_file_overrides_the_environment_and_hidden_entries_are_skipped() {
        let dir = Scratch::new("source-override");
        std::fs::create_dir_all(dir.0.join("..2026_12_01_00_00_00.1")).unwrap();
        dir.file("MESHDNS_TIMEOUT", "3s\n");
        dir.file("README", "not ours");
        let settings = Settings::from_vars(vars(&[
            ("MESHDNS_TIMEOUT", "2s"),
            ("MESHDNS_CACHE_SIZE", "5"),
        ]))
        .unwrap()
        .with_dir(&dir.0)
        .unwrap();
        assert_eq!(settings.get("MESHDNS_TIMEOUT"), Some("3s"));
        assert!(matches!(
            settings.source("MESHDNS_TIMEOUT"),
            Source::ConfigDir(_)
        ));
        assert_eq!(settings.get("MESHDNS_CACHE_SIZE"), Some("5"));
        assert_eq!(settings.source("MESHDNS_CACHE_SIZE"), Source::Environment);
        assert_eq!(settings.source("MESHDNS_LOG"), Source::Default);
    }

    #[test]
    fn every_file_the_directory_may_not_hold_is_named_at_once() {
        let dir = Scratch::new("source-several");
        dir.file("MESHDNS_CLUSTRES", "b=10.9.0.1");
        dir.file("MESHDNS_CONFIG_DIR", "/elsewhere");
        dir.file("MESHDNS_TIMEOUT", "3s");
        let errors = Settings::default().with_dir(&dir.0).unwrap_err();
        let named: Vec<&str> = errors.iter().map(|e| e.variable.as_str()).collect();
        assert_eq!(
            named,
            ["MESHDNS_CLUSTRES", "MESHDNS_CONFIG_DIR"],
            "{errors}"
        );
    }

    #[test]
    fn the_configuration_directory_cannot_name_itself() {
        let dir = Scratch::new("source-itself");
        dir.file("MESHDNS_CONFIG_DIR", "/elsewhere");
        let error = one_error(Settings::default().with_dir(&dir.0));
        assert_eq!(error.variable, "MESHDNS_CONFIG_DIR");
        assert!(
            error.reason.contains("only be set in the environment"),
            "{error}"
        );
    }

    #[test]
    fn an_unknown_file_in_the_directory_is_named_with_a_suggestion() {
        let dir = Scratch::new("source-typo");
        dir.file("MESHDNS_CLUSTRES", "b=10.9.0.1");
        let error = one_error(Settings::default().with_dir(&dir.0));
        assert_eq!(error.variable, "MESHDNS_CLUSTRES");
        assert!(error.reason.contains("MESHDNS_CLUSTERS"), "{error}");
    }
}
