//! Reading a file eval is named or keeps (`--data`, `--schema`, `run.json`,
//! `items.jsonl`): a regular file only, checked before it is opened (opening a FIFO waits
//! for a writer, and a FIFO or a device has no size to bound it by) and again on the
//! handle (the same file, not one swapped in between), and read no further than its bound
//! however it grows.

use std::fs::{File, Metadata, OpenOptions};
use std::io::Read;
use std::path::Path;

#[derive(Debug)]
pub enum Error {
    /// Not a regular file: what it is instead ("a FIFO", "a symbolic link", …).
    NotRegular(&'static str),
    /// More than `limit` bytes.
    TooLarge {
        size: u64,
        limit: u64,
    },
    /// The path named another file by the time it was opened.
    Changed,
    Io(std::io::Error),
}

impl Error {
    pub fn is_missing(&self) -> bool {
        matches!(self, Self::Io(e) if e.kind() == std::io::ErrorKind::NotFound)
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NotRegular(what) => write!(f, "{what}, not a regular file"),
            Self::TooLarge { size, limit } => {
                write!(f, "{size} bytes or more; the limit is {limit}")
            }
            Self::Changed => write!(f, "it was replaced while being opened"),
            Self::Io(e) => write!(f, "{e}"),
        }
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Self::Io(e)
    }
}

/// Whether a symbolic link at the path itself is followed (a file the user names) or
/// refused (a file in a folder eval writes, where a link was planted, not made by eval).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Links {
    Follow,
    Refuse,
}

/// Opens `path` with `options` once it is known to be a regular file.
pub fn open(path: &Path, links: Links, options: &OpenOptions) -> Result<File, Error> {
    let before = match links {
        Links::Follow => std::fs::metadata(path)?,
        Links::Refuse => std::fs::symlink_metadata(path)?,
    };
    if !before.is_file() {
        return Err(Error::NotRegular(kind(&before)));
    }
    let file = options.open(path)?;
    let after = file.metadata()?;
    if !after.is_file() || !same_file(&before, &after) {
        return Err(Error::Changed);
    }
    Ok(file)
}

/// `path`'s text, at most `limit` bytes.
pub fn read(path: &Path, links: Links, limit: u64) -> Result<String, Error> {
    let mut file = open(path, links, OpenOptions::new().read(true))?;
    read_to_end(&mut file, limit)
}

/// The rest of `file`'s text, at most `limit` bytes: refused by its size first, and read
/// no further than one byte past the limit if it grows meanwhile.
pub fn read_to_end(file: &mut File, limit: u64) -> Result<String, Error> {
    let size = file.metadata()?.len();
    if size > limit {
        return Err(Error::TooLarge { size, limit });
    }
    let mut bytes = Vec::new();
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    let read = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
    if read > limit {
        return Err(Error::TooLarge { size: read, limit });
    }
    String::from_utf8(bytes).map_err(|_| {
        Error::Io(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "not UTF-8 text",
        ))
    })
}

fn kind(meta: &Metadata) -> &'static str {
    let kind = meta.file_type();
    if kind.is_dir() {
        return "a folder";
    }
    if kind.is_symlink() {
        return "a symbolic link (not followed)";
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if kind.is_fifo() {
            return "a FIFO";
        }
        if kind.is_socket() {
            return "a socket";
        }
        if kind.is_char_device() || kind.is_block_device() {
            return "a device";
        }
    }
    "something else"
}

#[cfg(unix)]
fn same_file(a: &Metadata, b: &Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    a.dev() == b.dev() && a.ino() == b.ino()
}

#[cfg(not(unix))]
fn same_file(_: &Metadata, _: &Metadata) -> bool {
    true
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a panic is the test failure
mod tests {
    use super::*;

    #[test]
    fn only_a_regular_file_within_its_bound_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.txt");
        std::fs::write(&file, "12345").unwrap();
        assert_eq!(read(&file, Links::Refuse, 5).unwrap(), "12345");
        let error = read(&file, Links::Refuse, 4).unwrap_err().to_string();
        assert_eq!(error, "5 bytes or more; the limit is 4");
        assert_eq!(
            read(dir.path(), Links::Follow, 9).unwrap_err().to_string(),
            "a folder, not a regular file"
        );
        assert!(
            read(&dir.path().join("none"), Links::Follow, 9)
                .unwrap_err()
                .is_missing()
        );
        std::fs::write(dir.path().join("b.bin"), [0xff, 0xfe]).unwrap();
        assert!(
            read(&dir.path().join("b.bin"), Links::Follow, 9)
                .unwrap_err()
                .to_string()
                .contains("UTF-8")
        );
    }

    #[cfg(unix)]
    #[test]
    fn a_link_is_followed_only_when_asked() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.txt");
        std::fs::write(&file, "x").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert_eq!(read(&link, Links::Follow, 9).unwrap(), "x");
        assert_eq!(
            read(&link, Links::Refuse, 9).unwrap_err().to_string(),
            "a symbolic link (not followed), not a regular file"
        );
    }
}
