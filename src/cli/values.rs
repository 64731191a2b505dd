//! How the text of a flag or its `MASSGEN_SERVER_*` variable becomes a value: clap value
//! parsers whose errors name both the flag and the variable, since the operator may not
//! know which of the two set it.

use crate::config::DeliberationFormat;

/// How a flag or its variable names itself in an error: `--port / MASSGEN_SERVER_PORT`.
fn arg_names(arg: Option<&clap::Arg>) -> String {
    let Some(arg) = arg else {
        return "value".to_string();
    };
    let flag = arg
        .get_long()
        .map_or_else(|| arg.get_id().to_string(), |long| format!("--{long}"));
    match arg.get_env() {
        Some(var) => format!("{flag} / {}", var.to_string_lossy()),
        None => flag,
    }
}

fn invalid(cmd: &clap::Command, arg: Option<&clap::Arg>, problem: String) -> clap::Error {
    clap::Error::raw(
        clap::error::ErrorKind::InvalidValue,
        format!("{}: {problem}\n", arg_names(arg)),
    )
    .with_cmd(cmd)
}

/// A whole number from a flag or its variable (surrounding spaces allowed).
#[derive(Debug, Clone, Copy)]
pub(super) struct Number<T>(std::marker::PhantomData<fn() -> T>);

impl<T> Number<T> {
    pub(super) fn new() -> Self {
        Self(std::marker::PhantomData)
    }
}

impl<T> clap::builder::TypedValueParser for Number<T>
where
    T: std::str::FromStr + Clone + Send + Sync + 'static,
{
    type Value = T;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<T, clap::Error> {
        let text = value.to_string_lossy();
        text.trim()
            .parse()
            .map_err(|_| invalid(cmd, arg, format!("not a valid number: '{text}'")))
    }
}

/// An on/off value from a flag (`--debug` means true) or its variable: 1/true/yes/on or
/// 0/false/no/off, any case; empty counts as off.
#[derive(Debug, Clone, Copy)]
pub(super) struct Switch;

impl clap::builder::TypedValueParser for Switch {
    type Value = bool;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<bool, clap::Error> {
        let text = value.to_string_lossy();
        switch(&text)
            .ok_or_else(|| invalid(cmd, arg, format!("expected true or false, got '{text}'")))
    }
}

/// [`Switch`]'s reading of `text`, `None` when it is neither on nor off.
pub(super) fn switch(text: &str) -> Option<bool> {
    match text.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Some(true),
        "0" | "false" | "no" | "off" | "" => Some(false),
        _ => None,
    }
}

/// `--deliberation-format`: one of [`DeliberationFormat::NAMES`].
pub(super) fn deliberation_format(name: &str) -> Result<DeliberationFormat, String> {
    DeliberationFormat::from_name(name.trim())
        .ok_or_else(|| format!("expected one of {}", DeliberationFormat::NAMES.join(", ")))
}

/// The name of [`DeliberationFormat::default`], as `--deliberation-format` takes it (the
/// names cover every format, so it is always found).
pub(super) fn default_deliberation_format() -> &'static str {
    DeliberationFormat::NAMES
        .into_iter()
        .find(|name| DeliberationFormat::from_name(name) == Some(DeliberationFormat::default()))
        .unwrap_or_default()
}
