# Checks of the shipped library and of RUNPATHs, for ctest and the install test.
#   cmake -DREADELF=readelf [-DLIB=<libexecutorch_cuda.so.N> -DSONAME=<name>] [-DMAX_BYTES=<n>]
#         [-DRUNPATH_FILES=<a|b|...>] [-DFORBIDDEN=<text>] -P check_artifacts.cmake
# LIB: smaller than MAX_BYTES (default 5.5 MB: 3.37 MB with the fused linear's 42 kernels in the
#      decode fatbin and the cuBLASLt GEMM, 3.75 MB once the short-context decode attention (12
#      kernels) and head size 256 joined them, 4.20 MB with the cache-writing attention kernels
#      (10) and et_kv_write_* (6), 4.52 MB with et_add_norm_* (2) and the two-row attention
#      kernels (8), 5.00 MB with the fused linear's add-norm variants, the cluster split and the
#      one-row attention kernels (6), of which 0.51 MB is the symbol table that
#      `cmake --install --strip` removes;
#      a build with DWARF is about 12 MB), no DWARF (.debug_* sections), the
#      SONAME, and only aoti_torch_*, et_cuda_* and cuModuleLoadData (served to the
#      generated code, see src/shim/driver.rs) among its exported symbols.
# RUNPATH_FILES: no empty RUNPATH entry (which searches the current folder) and
#      no entry containing FORBIDDEN (e.g. the source or build folder).
if(NOT DEFINED MAX_BYTES)
  set(MAX_BYTES 5500000)
endif()

function(_readelf out)
  execute_process(COMMAND "${READELF}" ${ARGN} OUTPUT_VARIABLE _text RESULT_VARIABLE _rc ERROR_VARIABLE _err)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "${READELF} ${ARGN} failed (${_rc}): ${_err}")
  endif()
  set(${out} "${_text}" PARENT_SCOPE)
endfunction()

if(LIB)
  file(SIZE "${LIB}" _size)
  message(STATUS "${LIB}: ${_size} bytes")
  if(_size GREATER_EQUAL MAX_BYTES)
    message(FATAL_ERROR "${LIB} has ${_size} bytes, the limit is ${MAX_BYTES}")
  endif()
  _readelf(_sections -S -W "${LIB}")
  if(_sections MATCHES "\\.debug_[a-z_]+")
    message(FATAL_ERROR "${LIB} carries DWARF (${CMAKE_MATCH_0})")
  endif()
  _readelf(_dyn -d "${LIB}")
  if(NOT _dyn MATCHES "\\(SONAME\\)[^\n]*\\[([^]\n]*)\\]")
    message(FATAL_ERROR "${LIB} has no SONAME")
  endif()
  if(NOT CMAKE_MATCH_1 STREQUAL SONAME)
    message(FATAL_ERROR "${LIB} has the SONAME ${CMAKE_MATCH_1}, expected ${SONAME}")
  endif()
  # Defined dynamic symbols: readelf --dyn-syms lines "Num: Value Size Type Bind Vis Ndx Name".
  _readelf(_syms --dyn-syms -W "${LIB}")
  string(REPLACE "\n" ";" _lines "${_syms}")
  set(_count 0)
  set(_bad "")
  foreach(_line IN LISTS _lines)
    if(_line MATCHES "^ *[0-9]+: +[0-9a-f]+ +[0-9]+ +([A-Z_]+) +([A-Z_]+) +[A-Z_]+ +([A-Z0-9_]+) +([^ ]+)$")
      set(_type "${CMAKE_MATCH_1}")
      set(_bind "${CMAKE_MATCH_2}")
      set(_ndx "${CMAKE_MATCH_3}")
      set(_name "${CMAKE_MATCH_4}")
      if(_ndx STREQUAL "UND" OR _bind STREQUAL "LOCAL" OR _type STREQUAL "SECTION")
        continue()
      endif()
      math(EXPR _count "${_count} + 1")
      if(NOT _name MATCHES "^(aoti_torch_|et_cuda_|cuModuleLoadData$)")
        list(APPEND _bad "${_name}")
      endif()
    endif()
  endforeach()
  if(_count LESS 20)
    message(FATAL_ERROR "found only ${_count} exported symbols in ${LIB}: is readelf's format unexpected?")
  endif()
  if(_bad)
    message(FATAL_ERROR "${LIB} exports symbols outside aoti_torch_*/et_cuda_*/cuModuleLoadData: ${_bad}")
  endif()
  message(STATUS "${LIB}: SONAME ${SONAME}, no DWARF, ${_count} exported symbols, all aoti_torch_*/et_cuda_*/cuModuleLoadData")
endif()

if(RUNPATH_FILES)
  string(REPLACE "|" ";" _files "${RUNPATH_FILES}")
  foreach(_file IN LISTS _files)
    _readelf(_dyn -d "${_file}")
    if(NOT _dyn MATCHES "\\((RUNPATH|RPATH)\\)[^\n]*\\[([^]\n]*)\\]")
      message(STATUS "${_file}: no RUNPATH")
      continue()
    endif()
    set(_runpath "${CMAKE_MATCH_2}")
    message(STATUS "${_file}: RUNPATH ${_runpath}")
    if(_runpath STREQUAL "" OR _runpath MATCHES "^:|::|:$")
      message(FATAL_ERROR "${_file} has an empty RUNPATH entry (the current folder): '${_runpath}'")
    endif()
    if(FORBIDDEN)
      string(FIND "${_runpath}" "${FORBIDDEN}" _at)
      if(NOT _at EQUAL -1)
        message(FATAL_ERROR "${_file}'s RUNPATH names ${FORBIDDEN}: '${_runpath}'")
      endif()
    endif()
  endforeach()
endif()
