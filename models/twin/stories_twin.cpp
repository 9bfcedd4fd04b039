// The cached cost-twin set of stories260K (see stories_twin.h).
#include "models/twin/stories_twin.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <mutex>
#include <set>

#include "base/error.h"
#include "base/hash.h"
#include "base/mapped_file.h"
#include "base/paths.h"

namespace specbed {
namespace {

namespace fs = std::filesystem;

// Bumped whenever the padding, the recipe or a padding rule (generic or a method's) changes, so
// old caches are rebuilt.
constexpr int kTwinRecipeVersion = 2;

std::string SourceFolder(const std::string& folder) {
  return HomePath("models/stories260K/" + folder);
}

std::string StoriesBin() {
  return HomePath("models/stories260K/stories260K.bin");
}

// Hash of everything one piece is built from: the source files' bytes, `shape` (the numbers the
// padding reads) and the recipe version.
std::string Fingerprint(const std::vector<std::string>& files, const std::vector<int64_t>& shape) {
  uint64_t h = Fnv1a64(&kTwinRecipeVersion, sizeof(kTwinRecipeVersion));
  h = Fnv1a64(shape.data(), shape.size() * sizeof(int64_t), h);
  for (const std::string& f : files) {
    auto mapped = MappedFile::Open(f);
    h = Fnv1a64(mapped->data(), mapped->size(), h);
  }
  return Hex64(h);
}

// Holds an exclusive flock on `path` for its lifetime.
class FileLock {
 public:
  explicit FileLock(const std::string& path) {
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    SPECBED_CHECK(fd_ >= 0, "cannot open the lock file '", path,
                  "' of the cost-twin cache (set SPECBED_CACHE to a writable folder)");
    while (::flock(fd_, LOCK_EX) != 0) {
      SPECBED_CHECK(errno == EINTR, "cannot lock '", path, "'");
    }
  }
  ~FileLock() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace

std::string SpecBedCacheDir() {
  const char* env = std::getenv("SPECBED_CACHE");
  std::string dir = (env != nullptr && *env != '\0') ? env : HomePath(".cache");
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir;
}

TwinDrafterSpec StoriesTwinDraftLm() {
  return {"draft", kStoriesTwinDraftWidthFactor};
}

std::string StoriesTwinRoot() {
  return SpecBedCacheDir() + "/twins/stories260K-twin";
}

namespace {

// `root`/`piece`, built by `build` (into a temporary folder, renamed into place) unless its
// FINGERPRINT file holds fingerprint_of(); checked once per piece and process, under the cache's
// file lock.
std::string CachedPiece(const std::string& piece,
                        const std::function<std::string()>& fingerprint_of,
                        const std::function<void(const std::string& dir)>& build) {
  static std::mutex mutex;
  static std::set<std::string> checked;  // pieces found current in this process
  std::lock_guard<std::mutex> guard(mutex);
  const std::string root = StoriesTwinRoot(), dir = root + "/" + piece;
  if (checked.count(dir) != 0) return dir;
  const std::string fingerprint = fingerprint_of();
  const std::string stamp = dir + "/FINGERPRINT";
  std::error_code ec;
  fs::create_directories(root, ec);
  SPECBED_CHECK(!ec, "cannot create the cost-twin cache folder '", root, "': ", ec.message(),
                " (set SPECBED_CACHE to a writable folder)");
  auto current = [&] {
    if (!PathExists(stamp)) return false;
    std::string s = ReadFileToString(stamp);
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    return s == fingerprint;
  };
  if (!current()) {
    FileLock lock(root + "/.lock");
    if (!current()) {  // nobody built it while we waited
      const std::string tmp = dir + ".tmp." + std::to_string(::getpid());
      fs::remove_all(tmp, ec);
      build(tmp);
      WriteFileAtomically(tmp + "/FINGERPRINT", fingerprint + "\n");
      fs::remove_all(dir, ec);
      fs::rename(tmp, dir, ec);
      SPECBED_CHECK(!ec, "cannot move the cost twin into '", dir, "': ", ec.message());
      WriteFileAtomically(
          root + "/README.md",
          "Cost twin of stories260K and its shipped drafters, built by SpecBed on first use\n"
          "(models/twin/stories_twin.h). Safe to delete: it is rebuilt when needed.\n");
    }
  }
  checked.insert(dir);
  return dir;
}

}  // namespace

std::string StoriesTwinTarget() {
  const std::vector<int64_t> shape = {kStoriesTwinWidthFactor, kStoriesTwinDepth};
  auto fingerprint = [&] { return Fingerprint({StoriesBin()}, shape); };
  return CachedPiece("target", fingerprint, [&](const std::string& dir) {
    TwinShape target_shape;
    target_shape.width_factor = kStoriesTwinWidthFactor;
    target_shape.depth = kStoriesTwinDepth;
    WriteCheckpointFiles(
        dir, PadToCostTwin(Llama2cAsHf(StoriesBin()), target_shape, "stories260K", StoriesBin()));
  });
}

std::string StoriesTwinDrafter(const TwinDrafterSpec& spec,
                               const std::vector<TwinPadRule>& method_rules) {
  const std::string source = SourceFolder(spec.folder);
  const std::vector<std::string> files = {source + "/config.json", source + "/" + spec.tensor_file};
  const std::vector<int64_t> shape = {spec.width_factor, kStoriesTwinWidthFactor};
  auto fingerprint = [&] { return Fingerprint(files, shape); };
  return CachedPiece(spec.folder, fingerprint, [&](const std::string& dir) {
    TwinShape twin_shape;
    twin_shape.width_factor = spec.width_factor;
    twin_shape.target_width_factor = kStoriesTwinWidthFactor;
    // The drafter's own recipe (how it was trained) stays; the twin recipe says what it pads.
    WriteCheckpointFiles(dir, PadToCostTwin(ReadCheckpointFiles(source), twin_shape,
                                            "stories260K-" + spec.folder, source, method_rules));
  });
}

}  // namespace specbed
