//! A directory laid out and updated exactly as the kubelet does for a ConfigMap mounted as a
//! volume: the files live in a timestamped directory `..<stamp>`, `..data` is a symlink to it,
//! and each key is a symlink `KEY -> ..data/KEY`. An update writes a new timestamped
//! directory, points `..data_tmp` at it, renames `..data_tmp` over `..data` (the atomic step),
//! adds the symlinks of new keys, removes those of dropped keys, and deletes the old directory.

use std::collections::BTreeMap;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

/// A mounted ConfigMap, removed when dropped.
pub struct ConfigMapDir {
    pub path: PathBuf,
    generation: u32,
    keys: BTreeMap<String, String>,
}

impl ConfigMapDir {
    /// A new directory under the system's temp dir holding `files`.
    pub fn new(name: &str, files: &[(&str, &str)]) -> ConfigMapDir {
        let path = std::env::temp_dir().join(format!(
            "meshdns-{name}-{}-{}",
            std::process::id(),
            rand::random::<u32>()
        ));
        std::fs::create_dir_all(&path).unwrap();
        let mut dir = ConfigMapDir {
            path,
            generation: 0,
            keys: BTreeMap::new(),
        };
        dir.update(files);
        dir
    }

    /// Replaces the whole content by `files`, the kubelet's way.
    pub fn update(&mut self, files: &[(&str, &str)]) {
        self.generation += 1;
        let stamp = format!("..2026_12_01_00_00_00.{}", self.generation);
        let fresh = self.path.join(&stamp);
        std::fs::create_dir(&fresh).unwrap();
        for (key, value) in files {
            std::fs::write(fresh.join(key), value).unwrap();
        }
        let old = std::fs::read_link(self.path.join("..data")).ok();
        let tmp = self.path.join("..data_tmp");
        symlink(&stamp, &tmp).unwrap();
        std::fs::rename(&tmp, self.path.join("..data")).unwrap();
        let wanted: BTreeMap<String, String> = files
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        for key in wanted.keys().filter(|k| !self.keys.contains_key(*k)) {
            symlink(Path::new("..data").join(key), self.path.join(key)).unwrap();
        }
        for key in self.keys.keys().filter(|k| !wanted.contains_key(*k)) {
            std::fs::remove_file(self.path.join(key)).unwrap();
        }
        if let Some(old) = old {
            std::fs::remove_dir_all(self.path.join(old)).unwrap();
        }
        self.keys = wanted;
    }
}

impl Drop for ConfigMapDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}
