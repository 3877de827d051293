//! The `distlock` command; see the `distlock_cli` library for what it does.

fn main() {
    let cli = match distlock_cli::cli::parse(std::env::args_os()) {
        Ok(cli) => cli,
        Err(error) => std::process::exit(distlock_cli::report_usage_error(error)),
    };
    distlock_cli::init_diagnostics();
    let code = match distlock_cli::runtime_for(&cli.command) {
        Ok(runtime) => runtime.block_on(distlock_cli::execute(cli)),
        Err(error) => {
            eprintln!("distlock: cannot start the async runtime: {error}");
            distlock_cli::exit::FAILURE
        }
    };
    std::process::exit(code);
}
