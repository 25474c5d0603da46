//! Precompiled modules (CuPy's `RawModule(path=...)`): a cpu shared object built ahead of time,
//! given as a file or as bytes, launched safely through its declared entry; a file the disk
//! cache would not trust (a link, writable by others) and a source given with code are refused
//! when the module is made.

mod common; // its temporary cache folder: the tests never write the user's

use jitbridge::*;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

const OBJECT_SOURCE: &str = r#"
#include <stdint.h>
float bias = 0.25f;
/* y[i] = x[i] + bias, for i below both counts */
void add_bias(void **args, uint64_t threads) {
    const float *x = *(const float **)args[0];
    float *y = *(float **)args[1];
    uint64_t x_n = *(uint64_t *)args[2], y_n = *(uint64_t *)args[3];
    for (uint64_t i = 0; i < threads && i < x_n && i < y_n; i++)
        y[i] = x[i] + bias;
}
"#;

const ARGS: &[ArgDecl] = &[ArgDecl::In(DType::F32), ArgDecl::Out(DType::F32)];

/// A folder of this test's own, writable by this user alone, holding `add_bias.so`.
fn built_object(tag: &str) -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("jb-precompiled-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::DirBuilder::new().mode(0o700).create(&dir).unwrap();
    let source = dir.join("add_bias.c");
    std::fs::write(&source, OBJECT_SOURCE).unwrap();
    let object = dir.join("add_bias.so");
    let status = Command::new("cc")
        .args(["-O2", "-fPIC", "-shared", "-o"])
        .arg(&object)
        .arg(&source)
        .status()
        .unwrap();
    assert!(status.success(), "cc failed");
    std::fs::set_permissions(&object, std::fs::Permissions::from_mode(0o600)).unwrap();
    (dir, object)
}

fn module(name: &'static str, code: ModuleCode<'_>) -> Result<SourceModule, Error> {
    let spec = SourceModuleSpec {
        name,
        cpu_code: Some(code),
        entries: &["add_bias"],
        ..Default::default()
    };
    // SAFETY: the object's `add_bias` takes (x, y) and the two counts, keeps every index below
    // both, reads x and bias and writes only y; it has no load-time code.
    unsafe { SourceModule::new_declared(&spec, &[Signature::new("add_bias", ARGS)]) }
}

fn add_bias(m: &SourceModule) -> Vec<f32> {
    let device = Device::cpu().unwrap();
    let x = Array::from_slice(device, &[1.0f32, 2.0, 3.0], &[3]).unwrap();
    let mut y = Array::zeros(device, &[3], DType::F32).unwrap();
    m.launch("add_bias", &mut [Arg::In(&x), Arg::Out(&mut y)], LaunchShape::Threads(3)).unwrap();
    y.to_vec::<f32>().unwrap()
}

#[test]
fn a_shared_object_from_a_file_or_bytes_launches_its_declared_entry() {
    let (dir, object) = built_object("launch");
    let from_file = module("precompiled_launch", ModuleCode::File(&object)).unwrap();
    assert_eq!(add_bias(&from_file), [1.25, 2.25, 3.25]);
    let bytes = std::fs::read(&object).unwrap();
    let from_bytes = module("precompiled_launch", ModuleCode::Bytes(&bytes)).unwrap();
    assert_eq!(from_file.module_name(), from_bytes.module_name(), "one code, one module");
    assert_eq!(add_bias(&from_bytes), [1.25, 2.25, 3.25]);
    let mut bias = [0u8; 4];
    from_bytes.read_global(Device::cpu().unwrap(), "bias", 0, &mut bias).unwrap();
    assert_eq!(f32::from_ne_bytes(bias), 0.25);
    // A wrong declaration is still refused at launch: the declared checks hold for code too.
    let device = Device::cpu().unwrap();
    let x = Array::from_slice(device, &[1i32, 2, 3], &[3]).unwrap();
    let mut y = Array::zeros(device, &[3], DType::F32).unwrap();
    let error = from_file
        .launch("add_bias", &mut [Arg::In(&x), Arg::Out(&mut y)], LaunchShape::Threads(3))
        .unwrap_err();
    assert_eq!(error.code(), ErrorCode::Shape, "{error}");
    std::fs::remove_dir_all(dir).unwrap();
}

fn refused(path: &Path, text: &str) {
    let error = module("precompiled_refused", ModuleCode::File(path)).err().unwrap();
    assert_eq!(error.code(), ErrorCode::InvalidArgument, "{error}");
    assert!(error.to_string().contains(text), "{error} lacks {text:?}");
}

#[test]
fn untrusted_files_and_source_with_code_are_refused() {
    let (dir, object) = built_object("refused");
    let link = dir.join("link.so");
    std::os::unix::fs::symlink(&object, &link).unwrap();
    refused(&link, "is a symbolic link");
    std::fs::set_permissions(&object, std::fs::Permissions::from_mode(0o666)).unwrap();
    refused(&object, "writable by group or others");
    std::fs::set_permissions(&object, std::fs::Permissions::from_mode(0o600)).unwrap();
    refused(Path::new("add_bias.so"), "is not absolute");
    refused(&dir.join("missing.so"), "does not exist");
    let spec = SourceModuleSpec {
        name: "precompiled_both",
        cpu_source: Some(OBJECT_SOURCE),
        cpu_code: Some(ModuleCode::File(&object)),
        entries: &["add_bias"],
        ..Default::default()
    };
    let error = SourceModule::new(&spec).err().unwrap();
    assert!(error.to_string().contains("both a source and precompiled code"), "{error}");
    std::fs::remove_dir_all(dir).unwrap();
}
