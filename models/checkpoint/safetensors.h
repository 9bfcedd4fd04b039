// Reader and writer for the safetensors format (Hugging Face checkpoints), with no LibTorch
// dependency: the reader memory-maps the file, validates the header and hands out raw byte views;
// the writer stores raw byte buffers. Format and validation rules: models/checkpoint/README.md.
// Checked by: tests/models/safetensors_test.cpp (round trip of every dtype, every bad-input case).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/mapped_file.h"

namespace specbed {

enum class SafetensorsDtype { kF64, kF32, kF16, kBF16, kI64, kI32, kI16, kI8, kU8, kBool };

// Bytes per element (kBool: 1).
size_t SafetensorsDtypeSize(SafetensorsDtype dtype);
// The dtype string used in safetensors headers: "F64", "F32", "F16", "BF16", "I64", "I32",
// "I16", "I8", "U8", "BOOL".
std::string SafetensorsDtypeName(SafetensorsDtype dtype);
// Inverse of SafetensorsDtypeName; throws specbed::Error listing the known names otherwise.
SafetensorsDtype ParseSafetensorsDtype(const std::string& name);

// One tensor of an open file. `data` points into the file mapping (little-endian, row-major,
// not necessarily aligned); it stays valid while the SafetensorsFile (or its mapping) lives.
struct SafetensorsEntry {
  std::string name;
  SafetensorsDtype dtype;
  std::vector<int64_t> shape;  // [] for a scalar
  const uint8_t* data;
  size_t nbytes;  // == product(shape) * SafetensorsDtypeSize(dtype)
};

class SafetensorsFile {
 public:
  // Maps `path` read-only and validates the header. Throws specbed::Error naming the file (and
  // the tensor, where one is at fault) on any malformed input.
  static std::shared_ptr<SafetensorsFile> Open(const std::string& path);

  // Every tensor, in file offset order.
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  // The tensor called `name`, or nullptr.
  const SafetensorsEntry* Find(const std::string& name) const;
  // The header's "__metadata__" map (empty when absent).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::shared_ptr<MappedFile>& mapping() const { return mapping_; }
  const std::string& path() const { return path_; }

 private:
  SafetensorsFile() = default;
  std::string path_;
  std::shared_ptr<MappedFile> mapping_;
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, size_t> index_;  // name -> position in entries_
  std::map<std::string, std::string> metadata_;
};

// One tensor to write: `nbytes` bytes at `data` (little-endian, row-major).
struct SafetensorsTensorView {
  std::string name;
  SafetensorsDtype dtype;
  std::vector<int64_t> shape;
  const void* data;
  size_t nbytes;
};

// Writes `tensors` (data in the given order) and `metadata` to `path`. The header is padded with
// spaces so the data region starts 8-byte aligned. Writes `path`.tmp and renames it over `path`.
// Throws specbed::Error naming `path` (and the tensor) for a byte count that does not match the
// shape, a duplicate or reserved name, or an I/O failure.
void WriteSafetensors(const std::string& path, const std::vector<SafetensorsTensorView>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

}  // namespace specbed
