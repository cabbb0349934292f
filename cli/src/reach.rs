//! `kvsim reach`: which catalogue rows a plain swarm campaign reaches, and at which run
//! (`kvsim::reach`): one table row per catalogue row, with the run and seed that first reached it,
//! whether the space measures it (a profile that has the row's knob values, or the blind swarm for
//! rows no profile has) and the signatures that vanished under the row's fix.

use kvsim::fuzz::Space;
use kvsim::reach::Reach;
use kvsim::report::exit;

#[derive(clap::Args, Debug, Clone)]
pub struct ReachOpts {
    /// Draw knobs from this profile (default: blind, every knob drawn).
    #[arg(long)]
    pub profile: Option<String>,
    /// Also draw the hardware faults on a profile's campaign (as `kvsim fuzz --hardware-faults`).
    #[arg(long)]
    pub hardware_faults: bool,
    /// The most runs (at least 1; the campaign stops earlier once every row it measures is
    /// reached).
    #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub runs: u64,
    /// The first seed (run k draws seed SEED_START + k, as `kvsim fuzz`).
    #[arg(long, default_value_t = 0)]
    pub seed_start: u64,
    /// Print a progress line on stderr every this many runs (0: none).
    #[arg(long, default_value_t = 10_000)]
    pub progress: u64,
}

#[allow(clippy::disallowed_methods)] // progress lines show wall time; the model never reads a clock
pub fn run(o: &ReachOpts) -> i32 {
    let space = match &o.profile {
        Some(p) if kvsim::config::profile(p).is_none() => {
            eprintln!("error: --profile {p}: unknown profile{}", kvsim::config::unknown_profile_hint(p));
            return exit::BAD_INPUT;
        }
        Some(p) if o.hardware_faults => Space::Hardware(Box::new(Space::Profile(p.clone()))),
        Some(p) => Space::Profile(p.clone()),
        None if o.hardware_faults => {
            eprintln!("error: --hardware-faults needs --profile (the blind swarm draws them anyway)");
            return exit::BAD_INPUT;
        }
        None => Space::Blind,
    };
    // As `kvsim fuzz` refuses it: seeds past the last u64 wrapped to 0 silently.
    if o.seed_start.checked_add(o.runs).is_none() {
        eprintln!(
            "error: --seed-start {} with --runs {}: the seeds would pass {} (the largest); start lower",
            o.seed_start,
            o.runs,
            u64::MAX
        );
        return exit::BAD_INPUT;
    }
    let name = match &o.profile {
        Some(p) if o.hardware_faults => format!("{p}+hardware"),
        Some(p) => p.clone(),
        None => "blind".into(),
    };
    let t0 = std::time::Instant::now();
    let mut c = Reach::new(space, o.seed_start);
    let every = o.progress;
    c.run(o.runs, &mut |c, firsts| {
        for id in firsts {
            eprintln!(
                "{name}: run {} (seed {}): reached {id} ({:.1} s)",
                c.runs,
                c.seed_start + c.runs - 1,
                t0.elapsed().as_secs_f64()
            );
        }
        if every > 0 && c.runs % every == 0 {
            let open = c.rows.iter().filter(|r| r.measured && r.found.is_none()).count();
            eprintln!(
                "{name}: {} runs, {} failing, {open} measured row(s) open ({:.1} s)",
                c.runs,
                c.failing,
                t0.elapsed().as_secs_f64()
            );
        }
    });
    let wall = t0.elapsed().as_secs_f64();
    println!(
        "reach: {name}, {} runs from seed {} ({} with signatures, {} ablation runs), {wall:.1} s",
        c.runs, o.seed_start, c.failing, c.ablation_runs
    );
    println!();
    println!("| row | measured here | first run | seed | vanished under the row's fix |");
    println!("|---|---|---:|---:|---|");
    let mut open = 0;
    for r in &c.rows {
        let measured = if r.measured {
            "yes"
        } else if r.possible {
            "no (another profile has it)"
        } else {
            "no (cannot have it)"
        };
        match &r.found {
            Some(f) => println!("| {} | {measured} | {} | {} | {} |", r.row.id, f.run, f.seed, f.vanished.join(", ")),
            None if r.possible => {
                if r.measured {
                    open += 1;
                }
                println!("| {} | {measured} | not reached in {} runs | | |", r.row.id, c.runs)
            }
            None => println!("| {} | {measured} | | | |", r.row.id),
        }
    }
    println!();
    let measured = c.rows.iter().filter(|r| r.measured).count();
    println!("{} of {measured} measured row(s) reached", measured - open);
    if open > 0 {
        1
    } else {
        exit::CLEAN
    }
}
