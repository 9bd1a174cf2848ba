# ctest helper: run a command and check its outcome.
#   cmake -DCMD=<prog|arg|arg...> -DMODE=<mode> [-DEXPECT=<regex>] [-DEXIT=<status>] [-DSOURCE=<file>]
#         -P run_expect.cmake
# Arguments are separated by '|' (a list would not survive add_test).
# MODE=error:   exit status EXIT (default 1) and exactly one stderr line
#               "et_cuda_run: ..." matching EXPECT, printable ASCII only.
# MODE=fixture: success with "PASS" lines and no "FAIL" (EXPECT, if given, must match
#               stdout), or, on a machine without CUDA, exit status 77 with the one-line
#               error saying so; then the test prints ET_CUDA_SKIP (its SKIP_REGULAR_EXPRESSION).
# MODE=device:  the checks that need no GPU passed: exit status 77 and the no-CUDA line
#               (skipped), or, with a GPU, 0, or 1 with one "et_cuda_run: " line matching EXPECT.
# MODE=ok:      exit status 0 and stdout matching EXPECT.
# MODE=help:    exit status 0, and every flag that SOURCE (args.cpp) parses
#               (arg == "--flag") is explained on a line of stdout of its own.
string(REPLACE "|" ";" _cmd "${CMD}")
execute_process(COMMAND ${_cmd} RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
string(STRIP "${_err}" _err_line)
message(STATUS "exit status: ${_rc}\nstdout:\n${_out}\nstderr:\n${_err}")
if(NOT DEFINED EXIT)
  set(EXIT 1)
endif()

function(_expect_one_error_line status regex)
  if(NOT _rc STREQUAL "${status}")
    message(FATAL_ERROR "expected exit status ${status}, got ${_rc}")
  endif()
  if(_err_line MATCHES "\n" OR NOT _err_line MATCHES "^et_cuda_run: ")
    message(FATAL_ERROR "expected one stderr line starting with 'et_cuda_run: '")
  endif()
  # Nothing but printable ASCII reaches the terminal from our inputs.
  if(_err_line MATCHES "[^ -~]")
    message(FATAL_ERROR "the error line holds a byte that is not printable ASCII")
  endif()
  if(NOT _err_line MATCHES "${regex}")
    message(FATAL_ERROR "stderr does not match '${regex}'")
  endif()
endfunction()

function(_skip_without_cuda)
  _expect_one_error_line(77 "^et_cuda_run: no CUDA device: ")
  message("ET_CUDA_SKIP: no CUDA device here: only the checks before the device were run")
endfunction()

if(MODE STREQUAL "error")
  _expect_one_error_line("${EXIT}" "${EXPECT}")
elseif(MODE STREQUAL "fixture")
  if(_rc STREQUAL "0")
    if(_out MATCHES "FAIL")
      message(FATAL_ERROR "a case failed")
    endif()
    if(EXPECT AND NOT _out MATCHES "${EXPECT}")
      message(FATAL_ERROR "stdout does not match '${EXPECT}'")
    endif()
  else()
    _skip_without_cuda()
  endif()
elseif(MODE STREQUAL "device")
  if(_rc STREQUAL "77")
    _skip_without_cuda()
  elseif(NOT _rc STREQUAL "0")
    _expect_one_error_line(1 "${EXPECT}")
  endif()
elseif(MODE STREQUAL "ok")
  if(NOT _rc STREQUAL "0")
    message(FATAL_ERROR "expected exit status 0, got ${_rc}")
  endif()
  if(NOT _out MATCHES "${EXPECT}")
    message(FATAL_ERROR "stdout does not match '${EXPECT}'")
  endif()
elseif(MODE STREQUAL "help")
  if(NOT _rc STREQUAL "0")
    message(FATAL_ERROR "expected exit status 0, got ${_rc}")
  endif()
  if(NOT _err STREQUAL "")
    message(FATAL_ERROR "--help wrote to stderr")
  endif()
  # The flags the runner declares to CLI11: add_option/add_flag/each("-v,--verbose", ...).
  file(STRINGS "${SOURCE}" _parsed REGEX "(add_option|add_flag|each)\\(\"-")
  set(_flags "")
  foreach(_line IN LISTS _parsed)
    string(REGEX MATCH "\\(\"[^\"]*\"" _names "${_line}")
    string(REGEX MATCHALL "--[a-z_-]+" _found "${_names}")
    list(APPEND _flags ${_found})
  endforeach()
  list(LENGTH _flags _count)
  if(_count LESS 10)
    message(FATAL_ERROR "found only ${_count} flags in ${SOURCE}")
  endif()
  foreach(_flag IN LISTS _flags)
    if(NOT _out MATCHES "\n  ${_flag}[ ,]")
      message(FATAL_ERROR "--help does not explain ${_flag}")
    endif()
  endforeach()
  message(STATUS "--help explains all ${_count} flags")
else()
  message(FATAL_ERROR "unknown MODE '${MODE}'")
endif()
