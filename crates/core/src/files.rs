//! Reading the files an operator names (the config, the region catalogue, certificates and
//! keys): only regular files, and only up to a size cap, so that a named pipe cannot hold a
//! start or reload waiting and `/dev/zero` cannot fill the memory. (O_NONBLOCK does nothing to
//! a regular file's reads.) The one file gtd writes, the access log, is held to the same rule:
//! [`appendable`] checks it without touching it (`gtd check`), [`append`] opens it.

use std::io::{self, Read};
use std::path::{Path, PathBuf};

/// Most bytes of a config file or region catalogue.
pub const MAX_CONFIG_BYTES: u64 = 16 * 1024 * 1024;
/// Most bytes of a PEM certificate chain, CA bundle or key.
pub const MAX_PEM_BYTES: u64 = 4 * 1024 * 1024;

/// Why a file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// Opening or reading it failed.
    #[error("{0}")]
    Io(io::Error),
    /// It is a directory, a pipe, a device or a socket.
    #[error("not a regular file (a {0})")]
    NotRegular(&'static str),
    /// It holds more than the cap.
    #[error("too large ({size} bytes; at most {max})")]
    TooLarge {
        /// Its size, when known before reading.
        size: u64,
        /// The cap.
        max: u64,
    },
}

/// Why [`append`] would fail on a path (see [`appendable`]); said after the file's name.
#[derive(Debug, thiserror::Error)]
pub enum AppendError {
    /// A directory.
    #[error("is a directory; name a file in it")]
    Directory,
    /// A pipe, a device or a socket.
    #[error("is not a regular file (a {0})")]
    NotRegular(&'static str),
    /// A file this process may not write.
    #[error("is not writable: {0}")]
    NotWritable(io::Error),
    /// Missing, and its directory may not be written.
    #[error("cannot be created in {}: {error}", dir.display())]
    NotCreatable {
        /// The directory.
        dir: PathBuf,
        /// Why not.
        error: io::Error,
    },
    /// Missing, and what should be its directory is a file.
    #[error("cannot be created: {} is not a directory", .0.display())]
    ParentNotDirectory(PathBuf),
    /// Missing, and so is its directory.
    #[error("cannot be created: its directory {} does not exist", .0.display())]
    NoDirectory(PathBuf),
    /// `stat` failed otherwise.
    #[error("cannot be looked at: {0}")]
    Unreadable(io::Error),
}

/// The bytes of the regular file at `path` (symbolic links followed), at most `max` of them.
pub fn read(path: &Path, max: u64) -> Result<Vec<u8>, FileError> {
    use std::os::unix::fs::OpenOptionsExt;
    // Opened without blocking (a named pipe's open would wait for a writer), then looked at
    // through the open file, so that what is read is what was checked.
    let nonblocking = i32::try_from(rustix::fs::OFlags::NONBLOCK.bits()).unwrap_or(0);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nonblocking)
        .open(path)
        .map_err(FileError::Io)?;
    let meta = file.metadata().map_err(FileError::Io)?;
    let kind = meta.file_type();
    if !kind.is_file() {
        return Err(FileError::NotRegular(describe(&kind)));
    }
    if meta.len() > max {
        return Err(FileError::TooLarge {
            size: meta.len(),
            max,
        });
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    // The file may grow between the look and the read: never past the cap.
    file.take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(FileError::Io)?;
    if bytes.len() as u64 > max {
        return Err(FileError::TooLarge {
            size: bytes.len() as u64,
            max,
        });
    }
    Ok(bytes)
}

/// Opens the regular file at `path` for appending, creating it (mode 0644 less the umask) when
/// missing. Opened without blocking, as [`read`] opens, so that a named pipe put there cannot
/// hold the start or reload that opens it; anything but a regular file is refused.
pub fn append(path: &Path) -> Result<std::fs::File, FileError> {
    use std::os::unix::fs::OpenOptionsExt;
    let nonblocking = i32::try_from(rustix::fs::OFlags::NONBLOCK.bits()).unwrap_or(0);
    let file = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o644)
        .custom_flags(nonblocking)
        .open(path)
        .map_err(FileError::Io)?;
    let kind = file.metadata().map_err(FileError::Io)?.file_type();
    if !kind.is_file() {
        return Err(FileError::NotRegular(describe(&kind)));
    }
    Ok(file)
}

/// Why [`append`] would fail on `path`, told without creating or opening anything: it is a
/// directory or another kind of special file, it is not writable, or it is missing and its
/// directory does not exist or is not writable. (Run as root, the permission checks pass, as
/// the open would.)
pub fn appendable(path: &Path) -> Result<(), AppendError> {
    use rustix::fs::Access;
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_dir() => Err(AppendError::Directory),
        Ok(meta) if !meta.is_file() => Err(AppendError::NotRegular(describe(&meta.file_type()))),
        Ok(_) => rustix::fs::access(path, Access::WRITE_OK)
            .map_err(|e| AppendError::NotWritable(io::Error::from(e))),
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
            ) =>
        {
            let dir = match path.parent() {
                Some(d) if !d.as_os_str().is_empty() => d,
                _ => Path::new("."),
            };
            match std::fs::metadata(dir) {
                Ok(meta) if meta.is_dir() => {
                    rustix::fs::access(dir, Access::WRITE_OK | Access::EXEC_OK).map_err(|e| {
                        AppendError::NotCreatable {
                            dir: dir.to_owned(),
                            error: io::Error::from(e),
                        }
                    })
                }
                Ok(_) => Err(AppendError::ParentNotDirectory(dir.to_owned())),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    Err(AppendError::NoDirectory(dir.to_owned()))
                }
                Err(error) => Err(AppendError::NotCreatable {
                    dir: dir.to_owned(),
                    error,
                }),
            }
        }
        Err(e) => Err(AppendError::Unreadable(e)),
    }
}

fn describe(kind: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if kind.is_dir() {
        "directory"
    } else if kind.is_fifo() {
        "named pipe"
    } else if kind.is_char_device() {
        "character device"
    } else if kind.is_block_device() {
        "block device"
    } else if kind.is_socket() {
        "socket"
    } else {
        "special file"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_regular_files_under_the_cap() {
        let dir = tempfile::tempdir().unwrap();
        let ok = dir.path().join("ok.toml");
        std::fs::write(&ok, "a = 1\n").unwrap();
        assert_eq!(read(&ok, 100).unwrap(), b"a = 1\n");
        let big = read(&ok, 3).unwrap_err();
        assert_eq!(big.to_string(), "too large (6 bytes; at most 3)");
        let e = read(dir.path(), 100).unwrap_err();
        assert_eq!(e.to_string(), "not a regular file (a directory)");
        let e = read(Path::new("/dev/zero"), 100).unwrap_err();
        assert_eq!(e.to_string(), "not a regular file (a character device)");
        let fifo = dir.path().join("cat.fifo");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        // Refused at once: nothing opens the pipe, so nothing waits for a writer.
        let e = read(&fifo, 100).unwrap_err();
        assert_eq!(e.to_string(), "not a regular file (a named pipe)");
        let e = read(&dir.path().join("missing"), 100).unwrap_err();
        assert!(matches!(e, FileError::Io(ref io) if io.kind() == io::ErrorKind::NotFound));
    }

    #[test]
    fn only_regular_files_are_appended_to() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("access.log");
        appendable(&log).unwrap();
        {
            use std::io::Write as _;
            let mut f = append(&log).unwrap();
            f.write_all(b"one\n").unwrap();
            let mut f = append(&log).unwrap();
            f.write_all(b"two\n").unwrap();
        }
        assert_eq!(std::fs::read_to_string(&log).unwrap(), "one\ntwo\n");
        appendable(&log).unwrap();
        assert_eq!(
            appendable(dir.path()).unwrap_err().to_string(),
            "is a directory; name a file in it"
        );
        let e = append(dir.path()).unwrap_err();
        assert!(matches!(e, FileError::Io(_)), "{e}");
        let fifo = dir.path().join("log.fifo");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        assert_eq!(
            appendable(&fifo).unwrap_err().to_string(),
            "is not a regular file (a named pipe)"
        );
        // No reader: refused at once (ENXIO) instead of waiting for one.
        assert!(append(&fifo).is_err());
        let nowhere = dir.path().join("no/such/dir/access.log");
        let e = appendable(&nowhere).unwrap_err().to_string();
        assert!(e.starts_with("cannot be created: its directory "), "{e}");
        assert!(e.ends_with("no/such/dir does not exist"), "{e}");
        let under_file = log.join("access.log");
        let e = appendable(&under_file).unwrap_err().to_string();
        assert!(e.ends_with("access.log is not a directory"), "{e}");
    }
}
