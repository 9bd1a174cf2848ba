# ctest helper: run a command and check its outcome.
#   cmake -DCMD=<prog|arg|arg...> -DMODE=<mode> [-DEXPECT=<regex>] -P run_expect.cmake
# Arguments are separated by '|' (a list would not survive add_test).
# MODE=error:   exit status 1 and exactly one stderr line "et_cuda_run: ..." matching EXPECT.
# MODE=fixture: success with "PASS" lines and no "FAIL" (EXPECT, if given, must match stdout),
#               or, on a machine without CUDA, the one-line error saying so.
string(REPLACE "|" ";" _cmd "${CMD}")
execute_process(COMMAND ${_cmd} RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
string(STRIP "${_err}" _err_line)
message(STATUS "exit status: ${_rc}\nstdout:\n${_out}\nstderr:\n${_err}")

function(_expect_one_error_line regex)
  if(NOT _rc STREQUAL "1")
    message(FATAL_ERROR "expected exit status 1, got ${_rc}")
  endif()
  if(_err_line MATCHES "\n" OR NOT _err_line MATCHES "^et_cuda_run: ")
    message(FATAL_ERROR "expected one stderr line starting with 'et_cuda_run: '")
  endif()
  if(NOT _err_line MATCHES "${regex}")
    message(FATAL_ERROR "stderr does not match '${regex}'")
  endif()
endfunction()

if(MODE STREQUAL "error")
  _expect_one_error_line("${EXPECT}")
elseif(MODE STREQUAL "fixture")
  if(_rc STREQUAL "0")
    if(_out MATCHES "FAIL")
      message(FATAL_ERROR "a case failed")
    endif()
    if(EXPECT AND NOT _out MATCHES "${EXPECT}")
      message(FATAL_ERROR "stdout does not match '${EXPECT}'")
    endif()
  else()
    _expect_one_error_line("no CUDA")
    message(STATUS "no CUDA device here: only the error path was checked")
  endif()
else()
  message(FATAL_ERROR "unknown MODE '${MODE}'")
endif()
