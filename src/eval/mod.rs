//! `massgen eval`: the panel, its agents alone and self-consistency of an agent, on the
//! user's own questions, graded, with what each cost; see docs/eval.md.
//!
//! An edge like the doors: it turns items into the use case's asks (through the Chat
//! Completions door's own parser) and reads the sessions' ends. `data` reads the
//! questions, `arms` makes the panels each arm runs on, `session` runs one, `grade`
//! judges an answer, `answer` makes a graded result of a job's sessions, `run` schedules
//! it all (bounds, resume), `stop` says when no new item starts, `demo` is the panel and
//! questions of `--demo`, `files` and
//! `records` keep the results (`regular` reads the files it is named and keeps),
//! `report` (with `verdict` and `groups`), `stats` and `chart` sum them up, and `compare`
//! sets two runs' folders side by side (`massgen eval compare`).

mod answer;
mod arm_items;
pub mod arms;
pub mod chart;
pub mod compare;
pub mod data;
pub mod demo;
pub mod files;
pub mod grade;
pub mod groups;
pub mod progress;
mod records;
pub mod regular;
pub mod report;
pub mod resume;
pub mod run;
pub mod session;
pub mod stats;
pub mod stop;
pub mod verdict;
