// Read-only memory mapping of a whole file (checkpoints, tokenizer files). The mapping lives as
// long as the MappedFile; tensors viewing it must hold a shared_ptr to it.
// Checked by: tests/models/safetensors_test.cpp (through the safetensors reader).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace specbed {

class MappedFile {
 public:
  // Maps `path` read-only. Throws specbed::Error naming the path when it is not a regular file
  // (CheckPathKind: a FIFO or a directory fails at once) or cannot be opened.
  static std::shared_ptr<MappedFile> Open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

// Reads a whole file into a string. Throws specbed::Error naming the path when it is not a regular
// file (CheckPathKind) or cannot be read.
std::string ReadFileToString(const std::string& path);

// Writes `bytes` to `path`.tmp and renames it over `path`, so a crash leaves the old file intact.
// Errors name the file.
void WriteFileAtomically(const std::string& path, const std::string& bytes);

// True when `path` names an existing regular file or directory.
bool PathExists(const std::string& path);

// What an input path must be.
enum class PathKind { kFile, kDirectory };

// Throws specbed::Error "<what> '<path>': <why>" unless `path` is an existing regular file
// (kFile) or directory (kDirectory). <why> tells the cases apart: "no such file" / "no such
// directory", "a symbolic link loop", "is a directory, expected a file", "is a file, expected a
// directory", "is a FIFO (named pipe), expected a regular file" (and sockets, devices), or the
// system's reason. Never opens the path, so a FIFO cannot block.
void CheckPathKind(const std::string& path, PathKind kind, const std::string& what);

}  // namespace specbed
