// Checks of a .pte / .ptd file's framing, made before ExecuTorch reads it, so
// that a file of the wrong kind or a truncated one is one line in our words
// ("not an ExecuTorch program: ...") rather than the runtime's internals.
//
// A .pte is a flatbuffer with the file identifier "ET" + two digits at byte 4
// (this runtime reads "ET12"), optionally followed at byte 8 by an extended
// header "eh00" (length, program size, segment base offset, segment data size)
// that locates the program and the data segments in the file. A .ptd is a
// FlatTensor file: identifier "FT01" at byte 4 and a header "FH01" at byte 8
// (length, flatbuffer offset and size, segment base offset, data size).
#pragma once

#include <string>

namespace et_cuda_run {

// Fails ("<path>: not an ExecuTorch program: ...") unless the file looks like
// a complete ExecuTorch program.
void check_program_file(const std::string& path);

// Fails ("<path>: not an ExecuTorch data file (.ptd): ...") unless the file
// looks like a complete FlatTensor data file.
void check_data_file(const std::string& path);

}  // namespace et_cuda_run
