//! The `kvsim` binary: argument parsing, files and output around the pure `kvsim` library.

mod cli;

fn main() {
    std::process::exit(cli::main());
}
