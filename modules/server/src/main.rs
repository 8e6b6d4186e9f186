//! The `cloudcore` binary (`cargo install --path modules/server`); everything it does is
//! [`cloudcore_server::cli::main`].

fn main() -> std::process::ExitCode {
    cloudcore_server::cli::main()
}
