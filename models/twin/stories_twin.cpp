// The cached cost-twin set of stories260K (see stories_twin.h).
#include "models/twin/stories_twin.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <optional>

#include "base/error.h"
#include "base/hash.h"
#include "base/mapped_file.h"
#include "base/paths.h"

namespace specbed {
namespace {

namespace fs = std::filesystem;

struct DrafterSource {
  const char* family;  // folder under models/stories260K and in the twin set
  int64_t width_factor;
  const char* tensor_file = "model.safetensors";  // the shipped weights (Medusa's published name)
};

// The shipped drafters and the width factor of each twin (target factor: kStoriesTwinWidthFactor).
constexpr DrafterSource kDrafters[] = {
    {"draft", kStoriesTwinDraftWidthFactor},
    {"eagle3", kStoriesTwinWidthFactor},
    {"dflash", kStoriesTwinWidthFactor},
    {"jetspec", kStoriesTwinWidthFactor},
    {"specblock", kStoriesTwinWidthFactor},
    {"medusa", kStoriesTwinWidthFactor, "medusa_lm_head.safetensors"},
};

// Bumped whenever the padding or the recipe changes, so old caches are rebuilt.
constexpr int kTwinRecipeVersion = 1;

std::string SourceFolder(const std::string& family) {
  return HomePath("models/stories260K/" + family);
}

// Hash of everything a twin set is built from: the source files' bytes, the shape and the recipe
// version.
std::string SourceFingerprint() {
  uint64_t h = Fnv1a64(&kTwinRecipeVersion, sizeof(kTwinRecipeVersion));
  const int64_t shape[] = {kStoriesTwinWidthFactor, kStoriesTwinDepth,
                           kStoriesTwinDraftWidthFactor};
  h = Fnv1a64(shape, sizeof(shape), h);
  std::vector<std::string> files = {HomePath("models/stories260K/stories260K.bin")};
  for (const DrafterSource& d : kDrafters) {
    files.push_back(SourceFolder(d.family) + "/config.json");
    files.push_back(SourceFolder(d.family) + "/" + d.tensor_file);
  }
  for (const std::string& f : files) {
    auto mapped = MappedFile::Open(f);
    h = Fnv1a64(mapped->data(), mapped->size(), h);
  }
  return Hex64(h);
}

StoriesTwinPaths PathsUnder(const std::string& root) {
  StoriesTwinPaths p;
  p.root = root;
  p.target = root + "/target";
  p.draft = root + "/draft";
  p.eagle3 = root + "/eagle3";
  p.dflash = root + "/dflash";
  p.jetspec = root + "/jetspec";
  p.specblock = root + "/specblock";
  p.medusa = root + "/medusa";
  return p;
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

StoriesTwinPaths BuildStoriesTwin(const std::string& root) {
  const StoriesTwinPaths p = PathsUnder(root);
  TwinShape target_shape;
  target_shape.width_factor = kStoriesTwinWidthFactor;
  target_shape.depth = kStoriesTwinDepth;
  const std::string source = HomePath("models/stories260K/stories260K.bin");
  WriteCheckpointFiles(p.target,
                       PadToCostTwin(Llama2cAsHf(source), target_shape, "stories260K", source));
  for (const DrafterSource& d : kDrafters) {
    TwinShape shape;
    shape.width_factor = d.width_factor;
    shape.target_width_factor = kStoriesTwinWidthFactor;
    const std::string dir = SourceFolder(d.family);
    HfCheckpointFiles files = ReadCheckpointFiles(dir);
    // The drafter's own recipe (how it was trained) stays; the twin recipe says what it pads.
    const std::string of = std::string("stories260K-") + d.family;
    WriteCheckpointFiles(root + "/" + d.family, PadToCostTwin(files, shape, of, dir));
  }
  return p;
}

const StoriesTwinPaths& StoriesTwin() {
  static std::mutex mutex;
  static std::optional<StoriesTwinPaths> paths;
  std::lock_guard<std::mutex> guard(mutex);
  if (paths) return *paths;
  const std::string fingerprint = SourceFingerprint();
  const std::string twins = SpecBedCacheDir() + "/twins";
  const std::string root = twins + "/stories260K-twin";
  const std::string stamp = root + "/FINGERPRINT";
  std::error_code ec;
  fs::create_directories(twins, ec);
  SPECBED_CHECK(!ec, "cannot create the cost-twin cache folder '", twins, "': ", ec.message(),
                " (set SPECBED_CACHE to a writable folder)");
  auto current = [&] {
    if (!PathExists(stamp)) return false;
    std::string s = ReadFileToString(stamp);
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    return s == fingerprint;
  };
  if (!current()) {
    FileLock lock(twins + "/.lock");
    if (!current()) {  // nobody built it while we waited
      const std::string tmp = root + ".tmp." + std::to_string(::getpid());
      fs::remove_all(tmp, ec);
      BuildStoriesTwin(tmp);
      WriteFileAtomically(tmp + "/FINGERPRINT", fingerprint + "\n");
      WriteFileAtomically(
          tmp + "/README.md",
          "Cost twin of stories260K and its shipped drafters, built by SpecBed on first use\n"
          "(models/twin/stories_twin.h). Safe to delete: it is rebuilt when needed.\n");
      fs::remove_all(root, ec);
      fs::rename(tmp, root, ec);
      SPECBED_CHECK(!ec, "cannot move the cost twin into '", root, "': ", ec.message());
    }
  }
  paths = PathsUnder(root);
  return *paths;
}

}  // namespace specbed
