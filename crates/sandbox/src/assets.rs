//! The Node worker sources, compiled into the binary and written out once to
//! a directory named by their hash, so every runner (local or in an image)
//! uses exactly the code this build ships.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

const FILES: [(&str, &str); 10] = [
    ("runtime.mjs", include_str!("../worker/runtime.mjs")),
    ("callbacks.mjs", include_str!("../worker/callbacks.mjs")),
    ("worker.mjs", include_str!("../worker/worker.mjs")),
    ("oneshot.mjs", include_str!("../worker/oneshot.mjs")),
    ("launch.mjs", include_str!("../worker/launch.mjs")),
    ("bridge.mjs", include_str!("../worker/bridge.mjs")),
    ("hold.mjs", include_str!("../worker/hold.mjs")),
    ("egress.mjs", include_str!("../worker/egress.mjs")),
    ("channel.mjs", include_str!("../worker/channel.mjs")),
    ("fetch.mjs", include_str!("../worker/fetch.mjs")),
];

/// The worker sources installed on disk.
#[derive(Debug, Clone)]
pub struct WorkerAssets {
    dir: PathBuf,
}

impl WorkerAssets {
    /// Writes the sources under `root/<hash>/` (if not already there).
    pub fn install(root: &Path) -> std::io::Result<Self> {
        let mut hasher = Sha256::new();
        for (name, text) in FILES {
            hasher.update(name.as_bytes());
            hasher.update(text.as_bytes());
        }
        let dir = root.join(&hex::encode(hasher.finalize())[..16]);
        std::fs::create_dir_all(&dir)?;
        for (name, text) in FILES {
            let path = dir.join(name);
            if std::fs::read_to_string(&path).ok().as_deref() != Some(text) {
                let partial = dir.join(format!(".{name}.partial"));
                std::fs::write(&partial, text)?;
                std::fs::rename(&partial, &path)?;
            }
        }
        Ok(Self { dir })
    }

    /// The directory holding the sources.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The resident worker's entry point.
    pub fn worker(&self) -> PathBuf {
        self.dir.join("worker.mjs")
    }

    /// The one-shot runner's entry point.
    pub fn oneshot(&self) -> PathBuf {
        self.dir.join("oneshot.mjs")
    }
}
