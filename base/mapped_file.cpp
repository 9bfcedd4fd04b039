// Read-only file mapping (POSIX mmap) and whole-file reads.
#include "base/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "base/error.h"

namespace specbed {

namespace {

// "a FIFO (named pipe)", "a socket", ... for a stat mode that is neither a file nor a directory.
const char* SpecialFileKind(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "not a regular file";
}

}  // namespace

void CheckPathKind(const std::string& path, PathKind kind, const std::string& what) {
  const bool want_file = kind == PathKind::kFile;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT) Fail(what, " '", path, "': no such ", want_file ? "file" : "directory");
    if (err == ELOOP) Fail(what, " '", path, "': a symbolic link loop");
    Fail(what, " '", path, "': ", std::strerror(err));
  }
  if (want_file && S_ISDIR(st.st_mode)) Fail(what, " '", path, "' is a directory, expected a file");
  if (!want_file && S_ISREG(st.st_mode))
    Fail(what, " '", path, "' is a file, expected a directory");
  if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode)) {
    Fail(what, " '", path, "' is ", SpecialFileKind(st.st_mode), ", expected a ",
         want_file ? "regular file" : "directory");
  }
}

std::shared_ptr<MappedFile> MappedFile::Open(const std::string& path) {
  CheckPathKind(path, PathKind::kFile, "file");
  // O_NONBLOCK: a path swapped for a FIFO after the check still cannot block the open.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK);
  SPECBED_CHECK(fd >= 0, "cannot open '", path, "': ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    Fail("'", path, "' is not a regular file");
  }
  std::shared_ptr<MappedFile> file(new MappedFile());
  file->path_ = path;
  file->size_ = static_cast<size_t>(st.st_size);
  if (file->size_ > 0) {
    void* p = ::mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      ::close(fd);
      Fail("cannot mmap '", path, "': ", std::strerror(errno));
    }
    file->data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
  return file;
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
}

std::string ReadFileToString(const std::string& path) {
  CheckPathKind(path, PathKind::kFile, "file");
  std::ifstream in(path, std::ios::binary);
  SPECBED_CHECK(in.good(), "cannot open '", path, "': ", std::strerror(errno));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

bool PathExists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

void WriteFileAtomically(const std::string& path, const std::string& bytes) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    SPECBED_CHECK(out.good(), "cannot open '", tmp, "' for writing");
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.flush();
    SPECBED_CHECK(out.good(), "write to '", tmp, "' failed");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    Fail("cannot rename '", tmp, "' to '", path, "': ", std::strerror(err));
  }
}

}  // namespace specbed
