//! `kvsim bench`: whole-run benchmarks (filled in by the benchmark work).

#[derive(clap::Args, Debug, Clone)]
pub struct BenchOpts {
    /// Write the results table as JSON here.
    #[arg(long)]
    pub json: Option<String>,
}

pub fn run(_o: &BenchOpts) -> i32 {
    eprintln!("kvsim bench: not implemented yet");
    2
}
