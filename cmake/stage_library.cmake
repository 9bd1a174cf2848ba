# Build step: stage the Rust cdylib in the build folder under its SONAME, with
# the unversioned link name as a symlink.
#   cmake -DSOURCE=<cargo's libexecutorch_cuda.so> -DDEST_DIR=<dir> -DSONAME=<libexecutorch_cuda.so.N>
#         [-DREADELF=<readelf>] -P stage_library.cmake
# Fails when the library's SONAME is not SONAME (e.g. a prebuilt library from
# an older version, built without build.rs): programs linked against it would
# record a path instead of the name.
if(NOT EXISTS "${SOURCE}")
  message(FATAL_ERROR "${SOURCE} does not exist")
endif()
if(READELF)
  execute_process(COMMAND "${READELF}" -d "${SOURCE}" OUTPUT_VARIABLE _dyn RESULT_VARIABLE _rc)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "${READELF} -d ${SOURCE} failed (${_rc})")
  endif()
  if(NOT _dyn MATCHES "\\(SONAME\\)[^\n]*\\[([^]\n]*)\\]")
    message(FATAL_ERROR "${SOURCE} has no SONAME; expected ${SONAME} (build it with this version's build.rs)")
  endif()
  if(NOT CMAKE_MATCH_1 STREQUAL SONAME)
    message(FATAL_ERROR "${SOURCE} has the SONAME ${CMAKE_MATCH_1}; expected ${SONAME}")
  endif()
endif()
file(COPY_FILE "${SOURCE}" "${DEST_DIR}/${SONAME}" ONLY_IF_DIFFERENT)
file(CREATE_LINK "${SONAME}" "${DEST_DIR}/libexecutorch_cuda.so" SYMBOLIC)
