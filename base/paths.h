// Where SpecBed finds its shipped files (models/, datasets/data/, configs/) at run time.
// Resolution order: $SPECBED_HOME if set, else the source tree the binary was built from
// (SPECBED_SOURCE_DIR, baked in at configure time). Relative paths given by users are used as-is.
#pragma once

#include <string>

namespace specbed {

// Root directory of the SpecBed tree (no trailing slash).
std::string SpecBedHome();
// SpecBedHome() + "/" + relative.
std::string HomePath(const std::string& relative);

}  // namespace specbed
