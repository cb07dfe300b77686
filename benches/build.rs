//! Links PMDK's libpmem and libpmemobj when the `pmdk` feature is on; does nothing otherwise.
//!
//! The libraries are found with the `pkg-config` command (Debian's libpmem-dev and
//! libpmemobj-dev ship `.pc` files); without it, the usual library directories are searched for
//! the development symlinks `libpmem.so` and `libpmemobj.so`. If neither finds them, the build
//! stops and says which packages to install.

use std::path::{Path, PathBuf};
use std::process::{exit, Command};

const LIBS: [&str; 2] = ["libpmem", "libpmemobj"];
const INSTALL_HINT: &str = "the `pmdk` feature of pmem-bench links PMDK's libpmem and \
libpmemobj, and their development files were not found. Install them with\n\n    \
sudo apt-get install libpmem-dev libpmemobj-dev     (Debian, Ubuntu)\n    \
sudo dnf install libpmem-devel libpmemobj-devel    (Fedora)\n\n\
or build without the feature. If they are installed in an unusual place, point \
PKG_CONFIG_PATH at their .pc files.";

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=CARGO_FEATURE_PMDK");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    if std::env::var_os("CARGO_FEATURE_PMDK").is_none() {
        return;
    }
    let version = match pkg_config() {
        Some(version) => version,
        None => {
            match fallback_search() {
                Some(dir) => {
                    println!("cargo:rustc-link-search=native={}", dir.display());
                    for lib in LIBS {
                        println!("cargo:rustc-link-lib=dylib={}", &lib[3..]);
                    }
                    "unknown (found without pkg-config)".to_string()
                }
                None => {
                    eprintln!("error: {INSTALL_HINT}");
                    println!("cargo:warning=libpmem-dev and libpmemobj-dev are missing: see the error below");
                    exit(1);
                }
            }
        }
    };
    // The report names the version the binary was built against.
    println!("cargo:rustc-env=PMEM_BENCH_PMDK_VERSION={version}");
}

/// Ask `pkg-config` for both libraries: on success, print the link flags and return libpmemobj's
/// version; `None` if the command is missing or does not know the libraries.
fn pkg_config() -> Option<String> {
    let run = |args: &[&str]| -> Option<String> {
        let out = Command::new("pkg-config").args(args).output().ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    let mut args = vec!["--libs"];
    args.extend(LIBS);
    let flags = run(&args)?;
    let version = run(&["--modversion", "libpmemobj"])?;
    for flag in flags.split_whitespace() {
        if let Some(dir) = flag.strip_prefix("-L") {
            println!("cargo:rustc-link-search=native={dir}");
        } else if let Some(lib) = flag.strip_prefix("-l") {
            println!("cargo:rustc-link-lib=dylib={lib}");
        }
    }
    Some(version)
}

/// The first usual library directory that holds both development symlinks.
fn fallback_search() -> Option<PathBuf> {
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let candidates = [
        format!("/usr/lib/{arch}-linux-gnu"),
        "/usr/lib64".to_string(),
        "/usr/lib".to_string(),
        "/usr/local/lib64".to_string(),
        "/usr/local/lib".to_string(),
    ];
    candidates
        .iter()
        .map(Path::new)
        .find(|dir| {
            LIBS.iter()
                .all(|lib| dir.join(format!("{lib}.so")).exists())
        })
        .map(Path::to_path_buf)
}
