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
  // Maps `path` read-only. Throws specbed::Error naming the path when it cannot be opened.
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

// Reads a whole file into a string. Throws specbed::Error naming the path on failure.
std::string ReadFileToString(const std::string& path);

// Writes `bytes` to `path`.tmp and renames it over `path`, so a crash leaves the old file intact.
// Errors name the file.
void WriteFileAtomically(const std::string& path, const std::string& bytes);

// True when `path` names an existing regular file or directory.
bool PathExists(const std::string& path);

}  // namespace specbed
