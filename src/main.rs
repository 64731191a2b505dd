/// jemalloc, with a background thread that gives freed pages back to the system a second
/// after they were freed (.cargo/config.toml): glibc's malloc kept a burst's peak for good
/// (195 MiB after 1,000 sessions had ended, 48 MiB with jemalloc), and mimalloc peaked
/// higher; benches/README.md has the measurements.
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> std::process::ExitCode {
    #[cfg(all(target_os = "linux", target_env = "gnu", not(feature = "jemalloc")))]
    malloc_tuning::restart_serve_with_tuning();
    massgen::cli::main()
}

/// glibc's malloc raises its mmap threshold (up to 32 MiB) each time a big mmapped block
/// is freed: after the first big request body, blocks of that size come from the malloc
/// arenas instead, and freeing them gives nothing back to the system (measured: 30
/// requests of 9.5 MB left 150 MB behind for good). A fixed threshold keeps big blocks
/// mmapped and unmapped when freed. glibc reads it only at start-up, from
/// `GLIBC_TUNABLES`, and this crate has no unsafe code to call `mallopt`: so `serve`
/// starts itself again, once, with it set. An operator's own threshold is left alone.
#[cfg(all(target_os = "linux", target_env = "gnu", not(feature = "jemalloc")))]
mod malloc_tuning {
    use std::os::unix::process::CommandExt;

    const VARIABLE: &str = "GLIBC_TUNABLES";
    const NAME: &str = "glibc.malloc.mmap_threshold";
    /// glibc's own starting value is 128 KiB.
    const THRESHOLD: usize = 256 * 1024;

    pub fn restart_serve_with_tuning() {
        let args: Vec<_> = std::env::args_os().collect();
        if args.get(1).is_none_or(|a| a != "serve") {
            return;
        }
        let tunables = std::env::var(VARIABLE).unwrap_or_default();
        if tunables.contains(NAME) {
            return;
        }
        let ours = format!("{NAME}={THRESHOLD}");
        let tunables = if tunables.is_empty() {
            ours
        } else {
            format!("{tunables}:{ours}")
        };
        let error = match std::env::current_exe() {
            Ok(exe) => std::process::Command::new(exe)
                .arg0(&args[0])
                .args(&args[1..])
                .env(VARIABLE, tunables)
                .exec(),
            Err(e) => e,
        };
        // Only reached when the restart failed: serve anyway, saying what that costs.
        eprintln!(
            "massgen: warning: could not restart with {VARIABLE}={NAME}={THRESHOLD} ({error}): \
             memory freed after big requests may stay with the process"
        );
    }
}
