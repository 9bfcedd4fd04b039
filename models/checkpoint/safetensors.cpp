// safetensors reader (mmap + header validation) and writer; no LibTorch.
// Layout: 8-byte little-endian header length N, N bytes of JSON header, then the data region.
// Checked by: tests/models/safetensors_test.cpp.
#include "models/checkpoint/safetensors.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <set>
#include <utility>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/json_read.h"
#include "base/names.h"

namespace specbed {
namespace {

static_assert(sizeof(size_t) == 8, "safetensors offsets need a 64-bit size_t");

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // 100 MiB, as the reference implementation
constexpr const char* kMetadataKey = "__metadata__";

struct DtypeInfo {
  SafetensorsDtype dtype;
  const char* name;
  size_t size;
};

constexpr DtypeInfo kDtypes[] = {
    {SafetensorsDtype::kF64, "F64", 8}, {SafetensorsDtype::kF32, "F32", 4},
    {SafetensorsDtype::kF16, "F16", 2}, {SafetensorsDtype::kBF16, "BF16", 2},
    {SafetensorsDtype::kI64, "I64", 8}, {SafetensorsDtype::kI32, "I32", 4},
    {SafetensorsDtype::kI16, "I16", 2}, {SafetensorsDtype::kI8, "I8", 1},
    {SafetensorsDtype::kU8, "U8", 1},   {SafetensorsDtype::kBool, "BOOL", 1},
};

const DtypeInfo& Info(SafetensorsDtype dtype) {
  for (const auto& info : kDtypes) {
    if (info.dtype == dtype) return info;
  }
  Fail("invalid SafetensorsDtype value ", static_cast<int>(dtype));
}

std::vector<std::string> KnownDtypeNames() {
  std::vector<std::string> names;
  for (const auto& info : kDtypes) names.push_back(info.name);
  return names;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

// Element count of `shape` times `element_size`; false on overflow.
bool ByteCount(const std::vector<int64_t>& shape, size_t element_size, size_t* out) {
  unsigned __int128 total = element_size;
  for (int64_t d : shape) {
    total *= static_cast<uint64_t>(d);
    if (total > std::numeric_limits<size_t>::max()) return false;
  }
  *out = static_cast<size_t>(total);
  return true;
}

uint64_t ReadLe64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// True for a JSON integer (signed or unsigned; 1.0 is not an integer).
bool IsInteger(const nlohmann::json& v) {
  return v.is_number_integer();
}

}  // namespace

size_t SafetensorsDtypeSize(SafetensorsDtype dtype) {
  return Info(dtype).size;
}

std::string SafetensorsDtypeName(SafetensorsDtype dtype) {
  return Info(dtype).name;
}

SafetensorsDtype ParseSafetensorsDtype(const std::string& name) {
  for (const auto& info : kDtypes) {
    if (name == info.name) return info.dtype;
  }
  FailUnknownName("safetensors dtype", name, KnownDtypeNames());
}

std::shared_ptr<SafetensorsFile> SafetensorsFile::Open(const std::string& path) {
  std::shared_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path;
  file->mapping_ = MappedFile::Open(path);
  const uint8_t* bytes = file->mapping_->data();
  const size_t size = file->mapping_->size();
  const std::string where = "safetensors file '" + path + "'";

  SPECBED_CHECK(size >= 8, where, ": file is ", size,
                " bytes, shorter than the 8-byte header length prefix");
  const uint64_t header_len = ReadLe64(bytes);
  SPECBED_CHECK(header_len <= kMaxHeaderBytes, where, ": header length ", header_len,
                " exceeds the limit of ", kMaxHeaderBytes, " bytes (corrupt or not safetensors)");
  SPECBED_CHECK(header_len <= size - 8, where, ": header length ", header_len,
                " is larger than the ", size - 8, " bytes that follow the length prefix");
  const char* header_begin = reinterpret_cast<const char*>(bytes + 8);
  const uint8_t* data_region = bytes + 8 + header_len;
  const size_t data_size = size - 8 - header_len;

  JsonParseOptions options;
  options.expected = "a safetensors header object";
  const nlohmann::json header =
      ParseJsonText(std::string_view(header_begin, header_len), where + " header", options);
  SPECBED_CHECK(header.is_object(), where, ": header must be a JSON object, got ",
                header.type_name());

  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& value = it.value();
    if (name == kMetadataKey) {
      SPECBED_CHECK(value.is_object(), where, ": \"", kMetadataKey,
                    "\" must be an object mapping strings to strings, got ", value.type_name());
      for (auto m = value.begin(); m != value.end(); ++m) {
        SPECBED_CHECK(m.value().is_string(), where, ": \"", kMetadataKey, "\" entry '", m.key(),
                      "' must be a string, got ", m.value().type_name());
        file->metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string at = where + ", tensor '" + name + "'";
    SPECBED_CHECK(value.is_object(), at, ": entry must be an object with dtype, shape and ",
                  "data_offsets, got ", value.type_name());
    for (const char* field : {"dtype", "shape", "data_offsets"}) {
      SPECBED_CHECK(value.contains(field), at, ": missing \"", field, "\"");
    }
    const auto& dtype_json = value["dtype"];
    SPECBED_CHECK(dtype_json.is_string(), at, ": \"dtype\" must be a string, got ",
                  dtype_json.type_name());
    SafetensorsEntry entry;
    entry.name = name;
    try {
      entry.dtype = ParseSafetensorsDtype(dtype_json.get<std::string>());
    } catch (const Error& e) {
      Fail(at, ": ", e.what());
    }

    const auto& shape_json = value["shape"];
    SPECBED_CHECK(shape_json.is_array(), at, ": \"shape\" must be an array of integers, got ",
                  shape_json.type_name());
    for (const auto& d : shape_json) {
      SPECBED_CHECK(IsInteger(d), at, ": \"shape\" must contain only integers, got ", d.dump());
      SPECBED_CHECK(d.is_number_unsigned() || d.get<int64_t>() >= 0, at,
                    ": \"shape\" has negative dimension ", d.dump());
      SPECBED_CHECK(d.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()),
                    at, ": \"shape\" dimension ", d.dump(), " is too large");
      entry.shape.push_back(d.get<int64_t>());
    }

    const auto& offsets = value["data_offsets"];
    SPECBED_CHECK(offsets.is_array() && offsets.size() == 2, at,
                  ": \"data_offsets\" must be [begin, end], got ", offsets.dump());
    for (const auto& o : offsets) {
      SPECBED_CHECK(IsInteger(o) && (o.is_number_unsigned() || o.get<int64_t>() >= 0), at,
                    ": \"data_offsets\" must be non-negative integers, got ", offsets.dump());
    }
    const uint64_t begin = offsets[0].get<uint64_t>();
    const uint64_t end = offsets[1].get<uint64_t>();
    SPECBED_CHECK(begin <= end, at, ": data_offsets [", begin, ", ", end, "] has begin after end");
    SPECBED_CHECK(end <= data_size, at, ": data_offsets [", begin, ", ", end,
                  "] reach outside the data region of ", data_size, " bytes");
    size_t expected = 0;
    SPECBED_CHECK(ByteCount(entry.shape, SafetensorsDtypeSize(entry.dtype), &expected), at,
                  ": shape ", ShapeString(entry.shape), " is too large");
    SPECBED_CHECK(end - begin == expected, at, ": data_offsets [", begin, ", ", end, "] hold ",
                  end - begin, " bytes but shape ", ShapeString(entry.shape), " of ",
                  SafetensorsDtypeName(entry.dtype), " needs ", expected);
    entry.data = data_region + begin;
    entry.nbytes = expected;
    file->entries_.push_back(std::move(entry));
  }

  std::stable_sort(file->entries_.begin(), file->entries_.end(),
                   [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
                     return a.data < b.data || (a.data == b.data && a.nbytes < b.nbytes);
                   });
  // Non-empty byte ranges must not overlap (empty tensors occupy no bytes).
  const SafetensorsEntry* previous = nullptr;
  for (const auto& entry : file->entries_) {
    if (entry.nbytes == 0) continue;
    if (previous != nullptr) {
      SPECBED_CHECK(previous->data + previous->nbytes <= entry.data, where, ": tensor '",
                    entry.name, "' (bytes ", entry.data - data_region, "..",
                    entry.data - data_region + entry.nbytes, ") overlaps tensor '", previous->name,
                    "' (bytes ", previous->data - data_region, "..",
                    previous->data - data_region + previous->nbytes, ")");
    }
    previous = &entry;
  }
  for (size_t i = 0; i < file->entries_.size(); ++i) file->index_[file->entries_[i].name] = i;
  return file;
}

const SafetensorsEntry* SafetensorsFile::Find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

void WriteSafetensors(const std::string& path, const std::vector<SafetensorsTensorView>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  const std::string where = "writing safetensors file '" + path + "'";
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) {
    nlohmann::json meta = nlohmann::json::object();
    for (const auto& [key, value] : metadata) meta[key] = value;
    header[kMetadataKey] = meta;
  }
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    const std::string at = where + ", tensor '" + t.name + "'";
    SPECBED_CHECK(t.name != kMetadataKey, at, ": the name is reserved");
    SPECBED_CHECK(names.insert(t.name).second, at, ": duplicate tensor name");
    for (int64_t d : t.shape) SPECBED_CHECK(d >= 0, at, ": negative dimension ", d);
    size_t expected = 0;
    SPECBED_CHECK(ByteCount(t.shape, SafetensorsDtypeSize(t.dtype), &expected), at, ": shape ",
                  ShapeString(t.shape), " is too large");
    SPECBED_CHECK(t.nbytes == expected, at, ": ", t.nbytes, " bytes given but shape ",
                  ShapeString(t.shape), " of ", SafetensorsDtypeName(t.dtype), " needs ", expected);
    SPECBED_CHECK(t.nbytes == 0 || t.data != nullptr, at, ": null data pointer");
    header[t.name] = {{"dtype", SafetensorsDtypeName(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + t.nbytes}}};
    offset += t.nbytes;
  }
  std::string header_text = header.dump();
  // Pad with spaces (valid trailing JSON whitespace) so that 8 + N is a multiple of 8.
  header_text.append((8 - header_text.size() % 8) % 8, ' ');
  uint8_t prefix[8];
  uint64_t n = header_text.size();
  for (int i = 0; i < 8; ++i) prefix[i] = static_cast<uint8_t>(n >> (8 * i));

  const std::string tmp = path + ".tmp";
  FILE* out = std::fopen(tmp.c_str(), "wb");
  SPECBED_CHECK(out != nullptr, where, ": cannot open '", tmp, "': ", std::strerror(errno));
  bool ok = std::fwrite(prefix, 1, 8, out) == 8 &&
            std::fwrite(header_text.data(), 1, header_text.size(), out) == header_text.size();
  for (const auto& t : tensors) {
    if (!ok) break;
    if (t.nbytes > 0) ok = std::fwrite(t.data, 1, t.nbytes, out) == t.nbytes;
  }
  const int saved_errno = errno;
  ok = (std::fclose(out) == 0) && ok;
  if (!ok) {
    std::remove(tmp.c_str());
    Fail(where, ": write to '", tmp, "' failed: ", std::strerror(saved_errno));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int rename_errno = errno;
    std::remove(tmp.c_str());
    Fail(where, ": cannot rename '", tmp, "': ", std::strerror(rename_errno));
  }
}

}  // namespace specbed
