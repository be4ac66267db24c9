//! A scratch directory of a test's own under the system's temp dir, removed when dropped.

use std::path::PathBuf;

pub struct Scratch(pub PathBuf);

impl Scratch {
    /// A new, empty directory named after `test` (and this process, and a random number).
    pub fn new(test: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!(
            "meshdns-{test}-{}-{}",
            std::process::id(),
            rand::random::<u32>()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    /// Writes `content` to `name` in the directory; its path, as a string.
    pub fn file(&self, name: &str, content: &str) -> String {
        let path = self.0.join(name);
        std::fs::write(&path, content).unwrap();
        path.display().to_string()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
