//! The `kvsim` command's integration tests: they run the binary (exit codes, files, output) and
//! snapshot what it prints; a module per area. The library's own integration tests are in
//! `sim/tests/it`.

#[path = "../../../sim/tests/it/common.rs"]
mod common;
pub use common::*;

mod audit;
mod bad_input;
mod confirm;
mod deploy;
mod explore;
mod fuzz;
mod hostile;
mod oracle;
mod reach;
mod scenario_format;
mod snapshots;
mod trace;
mod workload_trace;

/// A scratch folder for one test, `kvsim-<tag>-<random>` in the temporary folder: removed when the
/// guard drops at the end of a passing test; a failing test keeps it and says where (its traces and
/// corpora are the evidence). Hold the guard for as long as the test uses paths under it.
pub struct Scratch(Option<tempfile::TempDir>);

impl Scratch {
    pub fn new(tag: &str) -> Self {
        let dir = tempfile::Builder::new().prefix(&format!("kvsim-{tag}-")).tempdir().expect("a scratch folder");
        Scratch(Some(dir))
    }

    /// `name` under the folder, as a string for a command line.
    pub fn at(&self, name: &str) -> String {
        self.join(name).to_string_lossy().into_owned()
    }
}

impl std::ops::Deref for Scratch {
    type Target = std::path::Path;
    fn deref(&self) -> &std::path::Path {
        self.0.as_ref().expect("held until drop").path()
    }
}

impl AsRef<std::path::Path> for Scratch {
    fn as_ref(&self) -> &std::path::Path {
        self
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if std::thread::panicking() {
            if let Some(dir) = self.0.take() {
                eprintln!("the failed test's files are kept in {}", dir.keep().display());
            }
        }
    }
}

/// A file in a scratch folder of its own: the path, and the folder's guard (the folder goes when
/// this drops). Reads as the path's string.
pub struct ScratchFile {
    _dir: Scratch,
    pub path: String,
}

impl ScratchFile {
    /// A file named `name` in a new scratch folder `kvsim-<tag>-…`; nothing is written.
    pub fn new(tag: &str, name: &str) -> Self {
        let dir = Scratch::new(tag);
        let path = dir.at(name);
        ScratchFile { _dir: dir, path }
    }
}

impl std::ops::Deref for ScratchFile {
    type Target = str;
    fn deref(&self) -> &str {
        &self.path
    }
}

impl AsRef<std::path::Path> for ScratchFile {
    fn as_ref(&self) -> &std::path::Path {
        self.path.as_ref()
    }
}

impl std::fmt::Display for ScratchFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.path)
    }
}
