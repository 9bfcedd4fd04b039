# Finds SpecBed's dependencies besides LibTorch: nlohmann_json, CLI11, SQLite3, PCRE2 (8-bit) and
# utf8proc; GoogleTest/GoogleMock are found by the top-level CMakeLists only when tests are on.
# Provides the targets nlohmann_json::nlohmann_json, CLI11::CLI11, SQLite::SQLite3,
# SpecBed::pcre2 and SpecBed::utf8proc.
#
# SPECBED_DEPS_DIR (cache path; default ${PROJECT_SOURCE_DIR}/.deps when that folder exists, i.e.
# holds carry_deps' PACKAGES file, at the first configure of a build folder; else empty): a folder
# written by scripts/carry_deps (Debian -dev packages unpacked with dpkg -x, static archives).
# When set, every package above and GoogleTest are taken from it and from nowhere else (each
# lookup is limited to the folder), so a machine without the -dev packages or pkg-config (the GPU
# machines) builds from the tree alone. When empty, the system's packages are
# used: PCRE2 and utf8proc through pkg-config, or find_path/find_library when pkg-config is absent.
# Checked by: scripts/check_carried_build (configure + build from .deps/ alone, pkg-config hidden,
# prints where each package was found).

set(_specbed_default_deps "")
if(EXISTS "${PROJECT_SOURCE_DIR}/.deps/PACKAGES")
  set(_specbed_default_deps "${PROJECT_SOURCE_DIR}/.deps")
endif()
set(SPECBED_DEPS_DIR "${_specbed_default_deps}" CACHE PATH
    "Carried dependency folder (scripts/carry_deps); empty = the system's packages")

# Static archives (from the carried folder) need their own link dependencies spelled out.
function(_specbed_static_link_deps target)
  get_target_property(_location ${target} IMPORTED_LOCATION)
  if(_location MATCHES "\\.a$")
    set_property(TARGET ${target} APPEND PROPERTY INTERFACE_LINK_LIBRARIES ${ARGN})
  endif()
endfunction()

# An IMPORTED target for a C library from find_path/find_library (pkg-config absent, or the
# carried folder): in SPECBED_DEPS_DIR only when set, else CMake's default search.
function(_specbed_find_c_library target header libnames)
  string(MAKE_C_IDENTIFIER "${target}" _var)
  if(SPECBED_DEPS_DIR)
    set(_where PATHS "${SPECBED_DEPS_DIR}/usr" NO_DEFAULT_PATH)
  else()
    set(_where "")
  endif()
  find_path(${_var}_INCLUDE_DIR NAMES ${header} PATH_SUFFIXES include ${_where})
  find_library(${_var}_LIBRARY NAMES ${libnames} PATH_SUFFIXES lib/${CMAKE_LIBRARY_ARCHITECTURE} lib
                                                                lib/x86_64-linux-gnu ${_where})
  if(NOT ${_var}_INCLUDE_DIR OR NOT ${_var}_LIBRARY)
    message(FATAL_ERROR "${target}: ${header} / lib${libnames} not found "
                        "(${_var}_INCLUDE_DIR=${${_var}_INCLUDE_DIR}, "
                        "${_var}_LIBRARY=${${_var}_LIBRARY}; SPECBED_DEPS_DIR='${SPECBED_DEPS_DIR}'). "
                        "Install the Debian -dev package (scripts/deps.sh) or run scripts/carry_deps.")
  endif()
  add_library(${target} UNKNOWN IMPORTED GLOBAL)
  set_target_properties(${target} PROPERTIES IMPORTED_LOCATION "${${_var}_LIBRARY}"
                                             INTERFACE_INCLUDE_DIRECTORIES "${${_var}_INCLUDE_DIR}")
  message(STATUS "${target}: ${${_var}_LIBRARY} (headers ${${_var}_INCLUDE_DIR})")
endfunction()

if(SPECBED_DEPS_DIR)
  if(NOT EXISTS "${SPECBED_DEPS_DIR}/PACKAGES")
    message(FATAL_ERROR "SPECBED_DEPS_DIR=${SPECBED_DEPS_DIR} is not a folder written by "
                        "scripts/carry_deps (no PACKAGES file): run scripts/carry_deps, or "
                        "configure with -DSPECBED_DEPS_DIR= to use the system's packages")
  endif()
  message(STATUS "SpecBed dependencies: carried folder ${SPECBED_DEPS_DIR}")
  # The CMake package folders, named exactly (the -dev packages put GoogleTest's under
  # lib/x86_64-linux-gnu, which CMake searches only where CMAKE_LIBRARY_ARCHITECTURE says so).
  foreach(_pkg nlohmann_json CLI11 GTest)
    file(GLOB _cfg "${SPECBED_DEPS_DIR}/usr/share/cmake/${_pkg}/${_pkg}Config.cmake"
         "${SPECBED_DEPS_DIR}/usr/lib/cmake/${_pkg}/${_pkg}Config.cmake"
         "${SPECBED_DEPS_DIR}/usr/lib/*/cmake/${_pkg}/${_pkg}Config.cmake")
    if(_cfg)
      list(GET _cfg 0 _cfg)
      get_filename_component(_cfg_dir "${_cfg}" DIRECTORY)
      set(${_pkg}_DIR "${_cfg_dir}" CACHE PATH "${_pkg} CMake package (carried)" FORCE)
    endif()
  endforeach()
  set(_sqlite_where PATHS "${SPECBED_DEPS_DIR}/usr" NO_DEFAULT_PATH)
  find_path(SQLite3_INCLUDE_DIR NAMES sqlite3.h PATH_SUFFIXES include ${_sqlite_where})
  find_library(SQLite3_LIBRARY NAMES libsqlite3.a sqlite3
               PATH_SUFFIXES lib/${CMAKE_LIBRARY_ARCHITECTURE} lib/x86_64-linux-gnu lib
               ${_sqlite_where})
endif()

find_package(nlohmann_json 3 REQUIRED)
find_package(CLI11 CONFIG REQUIRED)
find_package(SQLite3 REQUIRED)
find_package(Threads REQUIRED)
# The carried libsqlite3.a: libm, libdl and pthreads (part of libc since glibc 2.34, separate before).
_specbed_static_link_deps(SQLite::SQLite3 m ${CMAKE_DL_LIBS} Threads::Threads)
message(STATUS "nlohmann_json: ${nlohmann_json_DIR}; CLI11: ${CLI11_DIR}; "
               "SQLite3: ${SQLite3_LIBRARY} (headers ${SQLite3_INCLUDE_DIR})")

# PCRE2 (8-bit code units) and utf8proc.
set(_specbed_use_pkgconfig OFF)
if(NOT SPECBED_DEPS_DIR)
  find_package(PkgConfig QUIET)
  if(PkgConfig_FOUND)
    set(_specbed_use_pkgconfig ON)
  endif()
endif()
if(_specbed_use_pkgconfig)
  pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET GLOBAL libpcre2-8)
  pkg_check_modules(UTF8PROC REQUIRED IMPORTED_TARGET GLOBAL libutf8proc)
  add_library(SpecBed::pcre2 ALIAS PkgConfig::PCRE2)
  add_library(SpecBed::utf8proc ALIAS PkgConfig::UTF8PROC)
  message(STATUS "PCRE2, utf8proc: pkg-config (${PCRE2_LINK_LIBRARIES}; ${UTF8PROC_LINK_LIBRARIES})")
else()
  if(NOT SPECBED_DEPS_DIR)
    message(STATUS "pkg-config not found: PCRE2 and utf8proc through find_path/find_library")
  endif()
  # The carried folder has only the static archives. Their defines (PCRE2_STATIC,
  # UTF8PROC_STATIC) matter on Windows only; pcre_regex.cpp sets PCRE2_CODE_UNIT_WIDTH itself.
  _specbed_find_c_library(SpecBed::pcre2 pcre2.h "pcre2-8")
  _specbed_find_c_library(SpecBed::utf8proc utf8proc.h "utf8proc")
  _specbed_static_link_deps(SpecBed::pcre2 Threads::Threads)
endif()
