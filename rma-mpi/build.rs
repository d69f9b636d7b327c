//! Binds the MPI library that `MPICC` names (`MPICC=mpicc.mpich`, `mpicc.openmpi`, or
//! MPICH 5's `mpicc_abi` for the MPI-5 standard ABI; default `mpicc`): Rust bindings of
//! its `mpi.h` (bindgen, with the wrapper's own `-I` and `-D` flags: `mpicc_abi` says
//! `-DMPI_ABI`, which turns MPICH's `mpi.h` into the standard `mpi_abi.h`), its
//! libraries and run paths, and the ABI layer (csrc/abi.c) compiled by the wrapper
//! itself. Says whether the header has MPI-4's large-count calls (`large_count`), and
//! which ABI it is: Open MPI's (`open_mpi`), MPICH's own (`mpich_abi`), or neither (the
//! standard ABI).

use std::path::PathBuf;
use std::process::Command;

/// The wrapper's compile and link line (`-show`, or Open MPI's `-showme`).
fn show(mpicc: &str) -> Vec<String> {
    for flag in ["-show", "-showme"] {
        if let Ok(out) = Command::new(mpicc).arg(flag).output() {
            let line = String::from_utf8_lossy(&out.stdout).into_owned();
            if out.status.success() && !line.trim().is_empty() {
                return line.split_whitespace().map(str::to_string).collect();
            }
        }
    }
    panic!("{mpicc} -show printed nothing: set MPICC to an MPI compiler wrapper");
}

fn main() {
    println!("cargo:rerun-if-changed=csrc/abi.c");
    println!("cargo:rerun-if-env-changed=MPICC");
    println!("cargo::rustc-check-cfg=cfg(large_count)");
    println!("cargo::rustc-check-cfg=cfg(open_mpi)");
    println!("cargo::rustc-check-cfg=cfg(mpich_abi)");
    let mpicc = std::env::var("MPICC").unwrap_or_else(|_| "mpicc".into());
    let line = show(&mpicc);

    let mut clang_args = Vec::new();
    let mut include_dirs = Vec::new();
    let mut rpath_next = false;
    for arg in &line {
        if let Some(dir) = arg.strip_prefix("-I") {
            include_dirs.push(PathBuf::from(dir));
            clang_args.push(arg.clone());
        } else if arg.starts_with("-D") || arg.starts_with("-U") {
            clang_args.push(arg.clone());
        } else if let Some(dir) = arg.strip_prefix("-L") {
            println!("cargo:rustc-link-search=native={dir}");
        } else if let Some(lib) = arg.strip_prefix("-l") {
            println!("cargo:rustc-link-lib={lib}");
        }
        // Run paths, as `-Wl,-rpath -Wl,DIR` or `-Wl,-rpath,DIR`: a library outside the
        // system's directories (a venv's) is found at run time as the wrapper would.
        if rpath_next {
            if let Some(dir) = arg.strip_prefix("-Wl,") {
                println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
            }
            rpath_next = false;
        } else if arg == "-Wl,-rpath" {
            rpath_next = true;
        } else if let Some(dir) = arg.strip_prefix("-Wl,-rpath,") {
            println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
        }
    }
    cc::Build::new()
        .compiler(&mpicc)
        .file("csrc/abi.c")
        .warnings(true)
        .compile("rma_mpi_abi");

    // The MPI and PMPI calls and types of `mpi.h`. Handles become newtypes over the
    // ABI's representation (an int in MPICH, a pointer in Open MPI and the standard
    // ABI), so that mixing two kinds of handle does not compile.
    let bindings = bindgen::builder()
        .header_contents("rmampi_mpi.h", "#include <mpi.h>\n")
        .clang_args(&clang_args)
        .allowlist_function("P?MPI_.*")
        .allowlist_type("MPI_.*")
        .new_type_alias("MPI_(Comm|Datatype|Errhandler|Group|Info|Message|Op|Request|Session|Win)")
        .derive_partialeq(true)
        .layout_tests(false)
        .generate()
        .unwrap_or_else(|e| panic!("bindgen on {mpicc}'s mpi.h: {e}"));
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    bindings
        .write_to_file(out.join("mpi_bindings.rs"))
        .expect("write the MPI bindings");

    // MPI_Put_c and the other _c calls came with MPI-4.0 (MPICH 4, the standard ABI; not
    // Open MPI 4.1).
    let has_large_count = include_dirs
        .iter()
        .flat_map(|dir| std::fs::read_dir(dir).into_iter().flatten().flatten())
        .filter(|e| e.path().extension().is_some_and(|x| x == "h"))
        .any(|e| std::fs::read_to_string(e.path()).is_ok_and(|t| t.contains("int MPI_Put_c(")));
    if has_large_count {
        println!("cargo:rustc-cfg=large_count");
    }
    let header_says = |what: &str| {
        include_dirs
            .iter()
            .any(|dir| std::fs::read_to_string(dir.join("mpi.h")).is_ok_and(|t| t.contains(what)))
    };
    if line.iter().any(|a| a == "-DMPI_ABI") {
        // The standard ABI: neither MPI's own.
    } else if header_says("#define OPEN_MPI 1") {
        println!("cargo:rustc-cfg=open_mpi");
    } else if header_says("MPICH_VERSION") {
        println!("cargo:rustc-cfg=mpich_abi");
    }
}
