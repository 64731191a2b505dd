fn main() -> std::process::ExitCode {
    massgen::cli::main()
}
