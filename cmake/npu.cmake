# NPU target: the same kernel (kernels/combine_kernel.cpp) and host driver (host/*.cpp) as the
# CPU twin, built by bisheng against CANN (acl/acl.h, kernel_operator.h) and SHMEM (shmem.h,
# its device sources, libshmem). docs/npu.md#4-build-and-run and docs/hardware-rules.md#11-public-headers-and-the-build. The kernel's flag set
# follows the bisheng release, as SHMEM's own build does: `bisheng -v` dated 2026-03-27 or
# later compiles device code with -xasc --npu-arch=dav-2201 (A2/A3; dav-3510 on Ascend950)
# --cce-auto-infer-kernel-type=false (and --cce-auto-set-ffts=false on A2/A3); older ones with
# -xcce --cce-aicore-arch=dav-c220 (dav-c310) and the -mllvm options. FFTS_CONFIG=1 on A2/A3
# either way.
# Targets as SHMEM's examples make them (examples/CMakeLists.txt, aclshmem_add_collective_example):
# the kernel is a SHARED library (libcombine_kernel.so) linked with --cce-fatobj-link (old
# bisheng: and its --cce-aicore-arch), the driver a plain C++ executable linked with it and
# libshmem; every target links SHMEM's CANN set (CMakeLists.txt: link_libraries from
# ${ASCEND_HOME_PATH}/lib64), the kernel also unified_dlog when CANN has it. Unlike SHMEM
# (CMAKE_SKIP_RPATH, LD_LIBRARY_PATH set by its run scripts) the driver carries a build RPATH
# (this folder, libshmem's, CANN's lib64), so it runs as launched without LD_LIBRARY_PATH.
#
# Inputs (cache variables; combine_lab.build passes all of them, a manual configure may rely on
# the environment after `source <CANN>/set_env.sh`):
#   CMAKE_CXX_COMPILER  bisheng (<ASCEND_HOME_PATH>/compiler/ccec_compiler/bin/bisheng); must be
#                       given on the cmake command line, the compiler is fixed at project().
#   ASCEND_HOME_PATH    CANN toolkit (default: $ASCEND_HOME_PATH, then $ASCEND_TOOLKIT_HOME).
#   SHMEM_HOME          SHMEM install or source build (default: $SHMEM_HOME, then $SHMEM_HOME_PATH);
#                       include/shmem.h and lib/libshmem.so under <SHMEM_HOME>/shmem, <SHMEM_HOME>
#                       or <SHMEM_HOME>/install/shmem; the device sources (src/device, src) beside
#                       them (an install) or under <SHMEM_HOME> (a source tree).
#   COMBINE_BISHENG_FLAGS  asc (-xasc, bisheng >= 2026-03-27) or cce (-xcce); default from `bisheng -v`.
#   COMBINE_NPU_SOC     SoC name (Ascend910B3, Ascend910_9391, Ascend950...); sets the arch.
#   COMBINE_NPU_ARCH    dav-c220 (A2/A3) or dav-c310 (Ascend950); default from the SoC.
#   COMBINE_NPU_SDMA    ON when CANN >= 9.0.0 (SHMEM's SDMA engine); OFF builds an MTE-only driver.
#   COMBINE_KERNEL_DIR, COMBINE_KERNEL_SOURCES, COMBINE_KERNEL_MAIN, COMBINE_KERNEL_INCLUDES: your own
#                       kernel instead of kernels/ (CMakeLists.txt; docs/own-kernel.md), compiled as is.

# combine_npu_fail("part one " "part two"): the parts are separate arguments, joined here.
function(combine_npu_fail)
  string(CONCAT _what ${ARGV})
  message(FATAL_ERROR "COMBINE_TARGET=npu: ${_what}")
endfunction()

# ---- CANN ----
if(NOT ASCEND_HOME_PATH)
  if(DEFINED ENV{ASCEND_HOME_PATH})
    set(_cann "$ENV{ASCEND_HOME_PATH}")
  elseif(DEFINED ENV{ASCEND_TOOLKIT_HOME})
    set(_cann "$ENV{ASCEND_TOOLKIT_HOME}")
  endif()
  set(ASCEND_HOME_PATH "${_cann}" CACHE PATH "CANN toolkit (ASCEND_HOME_PATH)")
endif()
if(NOT ASCEND_HOME_PATH OR NOT IS_DIRECTORY "${ASCEND_HOME_PATH}")
  combine_npu_fail("CANN not found (ASCEND_HOME_PATH='${ASCEND_HOME_PATH}'): source <CANN>/set_env.sh")
endif()

get_filename_component(_cxx_name "${CMAKE_CXX_COMPILER}" NAME)
if(NOT _cxx_name MATCHES "^bisheng")
  combine_npu_fail("the C++ compiler is ${CMAKE_CXX_COMPILER}, not bisheng: configure a fresh build folder with "
                   "-DCMAKE_CXX_COMPILER=${ASCEND_HOME_PATH}/compiler/ccec_compiler/bin/bisheng")
endif()

# ---- SHMEM ----
if(NOT SHMEM_HOME)
  if(DEFINED ENV{SHMEM_HOME})
    set(_shmem "$ENV{SHMEM_HOME}")
  elseif(DEFINED ENV{SHMEM_HOME_PATH})
    set(_shmem "$ENV{SHMEM_HOME_PATH}")
  endif()
  set(SHMEM_HOME "${_shmem}" CACHE PATH "SHMEM install or source build")
endif()
set(COMBINE_SHMEM_ROOT "")
foreach(_cand "${SHMEM_HOME}/shmem" "${SHMEM_HOME}" "${SHMEM_HOME}/install/shmem")
  if(NOT COMBINE_SHMEM_ROOT AND EXISTS "${_cand}/include/shmem.h" AND EXISTS "${_cand}/lib/libshmem.so")
    set(COMBINE_SHMEM_ROOT "${_cand}")
  endif()
endforeach()
if(NOT SHMEM_HOME OR NOT COMBINE_SHMEM_ROOT)
  combine_npu_fail("SHMEM not found (SHMEM_HOME='${SHMEM_HOME}'): need include/shmem.h and lib/libshmem.so "
                   "under it or its shmem/ folder; build SHMEM (bash scripts/build.sh) and set SHMEM_HOME")
endif()

# ---- SoC -> arch ----
set(COMBINE_NPU_SOC "" CACHE STRING "Ascend SoC name (npu-smi info), e.g. Ascend910B3 or Ascend950")
if(NOT COMBINE_NPU_ARCH)
  if(COMBINE_NPU_SOC MATCHES "950")
    set(_arch dav-c310)
  elseif(COMBINE_NPU_SOC MATCHES "910B|910_93")
    set(_arch dav-c220)
  else()
    combine_npu_fail("COMBINE_NPU_SOC='${COMBINE_NPU_SOC}': not an A2/A3 (Ascend910B*, Ascend910_93*) or "
                     "Ascend950 SoC; set COMBINE_NPU_SOC or COMBINE_NPU_ARCH=dav-c220|dav-c310")
  endif()
  set(COMBINE_NPU_ARCH "${_arch}" CACHE STRING "bisheng --cce-aicore-arch (dav-c220 A2/A3, dav-c310 Ascend950)")
endif()
if(NOT COMBINE_NPU_ARCH MATCHES "^dav-c(220|310)$")
  combine_npu_fail("COMBINE_NPU_ARCH='${COMBINE_NPU_ARCH}': must be dav-c220 or dav-c310")
endif()
option(COMBINE_NPU_SDMA "SHMEM SDMA engine available (CANN >= 9.0.0)" OFF)

# ---- bisheng flag set, by its release date (SHMEM switched at 2026-03-27) ----
if(NOT COMBINE_BISHENG_FLAGS)
  execute_process(COMMAND "${CMAKE_CXX_COMPILER}" -v OUTPUT_VARIABLE _bs_out ERROR_VARIABLE _bs_err
                  RESULT_VARIABLE _bs_rc TIMEOUT 30)
  string(REGEX MATCH "(20[0-9][0-9])-([01][0-9])-([0-3][0-9])" _bs_date "${_bs_out} ${_bs_err}")
  set(_flags cce)
  if(_bs_date)
    string(REPLACE "-" "" _bs_stamp "${_bs_date}")
    if(_bs_stamp GREATER_EQUAL 20260327)
      set(_flags asc)
    endif()
  endif()
  set(COMBINE_BISHENG_FLAGS "${_flags}" CACHE STRING "asc (-xasc, bisheng >= 2026-03-27) or cce (-xcce)")
  message(STATUS "combine_lab NPU: bisheng -v date '${_bs_date}' -> ${_flags} flag set")
endif()
if(NOT COMBINE_BISHENG_FLAGS MATCHES "^(asc|cce)$")
  combine_npu_fail("COMBINE_BISHENG_FLAGS='${COMBINE_BISHENG_FLAGS}': must be asc or cce")
endif()
set(CMAKE_EXPORT_COMPILE_COMMANDS ON)

# ---- include and library paths ----
set(_cann_inc_candidates
  "${ASCEND_HOME_PATH}/include"
  "${ASCEND_HOME_PATH}/include/experiment/runtime"
  "${ASCEND_HOME_PATH}/include/experiment/msprof"
  "${ASCEND_HOME_PATH}/compiler/tikcpp"
  "${ASCEND_HOME_PATH}/compiler/tikcpp/tikcfw"
  "${ASCEND_HOME_PATH}/compiler/tikcpp/tikcfw/impl"
  "${ASCEND_HOME_PATH}/compiler/tikcpp/tikcfw/interface"
  "${ASCEND_HOME_PATH}/${CMAKE_SYSTEM_PROCESSOR}-linux/include"
  "${ASCEND_HOME_PATH}/${CMAKE_SYSTEM_PROCESSOR}-linux/pkg_inc"
  "${ASCEND_HOME_PATH}/${CMAKE_SYSTEM_PROCESSOR}-linux/pkg_inc/runtime"
  "${ASCEND_HOME_PATH}/${CMAKE_SYSTEM_PROCESSOR}-linux/tikcpp/tikcfw"
  "${ASCEND_HOME_PATH}/${CMAKE_SYSTEM_PROCESSOR}-linux/tikcpp/tikcfw/impl"
  "${ASCEND_HOME_PATH}/${CMAKE_SYSTEM_PROCESSOR}-linux/tikcpp/tikcfw/interface"
  "${ASCEND_HOME_PATH}/asc/include"
  # opbase's host headers (opdev/fp16_t.h: op::fp16_t, which kernels written for SHMEM instantiate)
  "${ASCEND_HOME_PATH}/include/aclnn"
  "${ASCEND_HOME_PATH}/include/nnopbase"
  "${ASCEND_HOME_PATH}/pkg_inc")
set(COMBINE_CANN_INCLUDES "")
foreach(_d ${_cann_inc_candidates})
  if(IS_DIRECTORY "${_d}")
    list(APPEND COMBINE_CANN_INCLUDES "${_d}")
  endif()
endforeach()
find_file(COMBINE_ACL_H acl/acl.h PATHS ${COMBINE_CANN_INCLUDES} NO_DEFAULT_PATH NO_CACHE)
find_file(COMBINE_KERNEL_OPERATOR_H kernel_operator.h PATHS ${COMBINE_CANN_INCLUDES} NO_DEFAULT_PATH NO_CACHE)
if(NOT COMBINE_ACL_H OR NOT COMBINE_KERNEL_OPERATOR_H)
  combine_npu_fail("CANN at ${ASCEND_HOME_PATH} lacks acl/acl.h or kernel_operator.h (Ascend C): install the "
                   "toolkit package, not only the runtime")
endif()
# SHMEM's device headers include .hpp files from its src/device and src folders (an install
# copies them to <root>/src); its cycle-profiling macros live there too.
set(COMBINE_SHMEM_INCLUDES "${COMBINE_SHMEM_ROOT}/include")
set(COMBINE_SHMEM_DEVICE_DIR "")
foreach(_base "${COMBINE_SHMEM_ROOT}" "${SHMEM_HOME}")
  if(NOT COMBINE_SHMEM_DEVICE_DIR AND IS_DIRECTORY "${_base}/src/device")
    set(COMBINE_SHMEM_DEVICE_DIR "${_base}/src/device")
    list(APPEND COMBINE_SHMEM_INCLUDES "${_base}/src/device" "${_base}/src")
  endif()
endforeach()
if(NOT COMBINE_SHMEM_DEVICE_DIR)
  combine_npu_fail("SHMEM at ${COMBINE_SHMEM_ROOT} has no src/device (its device headers include files from there): "
                   "install SHMEM with its device sources, or set SHMEM_HOME to the source tree")
endif()

# SHMEM links every target with these, in this order, from CANN's lib64 (its CMakeLists.txt:
# link_directories + link_libraries); stdc++, m, dl and pthread are the system's.
set(COMBINE_CANN_LIBDIR "${ASCEND_HOME_PATH}/lib64")
set(COMBINE_NPU_LINK_LIBS runtime stdc++ ascendcl m tiling_api platform c_sec dl nnopbase pthread)
set(_missing_libs "")
foreach(_lib runtime ascendcl tiling_api platform c_sec nnopbase)
  find_library(_found_lib ${_lib} PATHS "${COMBINE_CANN_LIBDIR}" NO_DEFAULT_PATH NO_CACHE)
  if(NOT _found_lib)
    list(APPEND _missing_libs "lib${_lib}")
  endif()
  unset(_found_lib)
endforeach()
if(_missing_libs)
  string(REPLACE ";" ", " _missing_libs "${_missing_libs}")
  combine_npu_fail("CANN at ${ASCEND_HOME_PATH} lacks ${_missing_libs} in lib64 (SHMEM links every target with "
                   "them): point ASCEND_HOME_PATH at a complete CANN toolkit install")
endif()
# SHMEM's example kernels also link unified_dlog when CANN has it.
find_library(COMBINE_UNIFIED_DLOG unified_dlog PATHS "${COMBINE_CANN_LIBDIR}" NO_DEFAULT_PATH NO_CACHE)
set(COMBINE_SHMEM_LIB "${COMBINE_SHMEM_ROOT}/lib/libshmem.so")

set(_npu_defs COMBINE_TARGET_NPU=1 COMBINE_NPU_SDMA=$<BOOL:${COMBINE_NPU_SDMA}>)
if(COMBINE_NPU_ARCH STREQUAL "dav-c220")
  # A2/A3, where cross-core sync (SyncAll) uses FFTS: the host hands the kernel the FFTS base
  # address (util_get_ffts_config) and the kernel sets it first (util_set_ffts_config).
  # COMBINE_NPU_FFTS=1 marks such a build (no source reads it today). FFTS_CONFIG=1 is what SHMEM's build defines for all
  # its targets on A2/A3; only libshmem's own source reads it (src/host/sync/shmemi_sync.cpp: whether
  # its init fetches that address), none of the headers the kernel includes, so here it only keeps
  # the compile line SHMEM's.
  list(APPEND _npu_defs COMBINE_NPU_FFTS=1 FFTS_CONFIG=1)
endif()

# SHMEM's compile options for every target (its CMakeLists.txt: add_compile_definitions
# _GLIBCXX_USE_CXX11_ABI=1 with USE_CXX11_ABI on, its default; add_compile_options -D_FORTIFY_SOURCE=2,
# -fstack-protector-strong, -DL2_CACHE_HINT -DTILING_KEY_VAR "to avoid Ascend C interference"), and
# its plain C++ ones (CMAKE_CPP_COMPILE_OPTIONS: -xc++, -include stdint.h, -include stddef.h). What
# this build leaves out of SHMEM's, and why: docs/npu.md#12-build-flags-against-shmems-examples.
set(COMBINE_SHMEM_COMPILE_FLAGS -D_GLIBCXX_USE_CXX11_ABI=1 -D_FORTIFY_SOURCE=2 -fstack-protector-strong
    -DL2_CACHE_HINT -DTILING_KEY_VAR)
set(COMBINE_SHMEM_CPP_FLAGS -xc++ "SHELL:-include stdint.h" "SHELL:-include stddef.h" ${COMBINE_SHMEM_COMPILE_FLAGS})

# ---- the kernel: int32_t and float16_t instances in one source, a shared library ----
if(COMBINE_BISHENG_FLAGS STREQUAL "asc")
  if(COMBINE_NPU_ARCH STREQUAL "dav-c220")
    set(_kernel_flags -xasc --npu-arch=dav-2201 --cce-auto-infer-kernel-type=false --cce-auto-set-ffts=false)
  else()
    set(_kernel_flags -xasc --npu-arch=dav-3510 --cce-auto-infer-kernel-type=false)
  endif()
  set(_link_flags --cce-fatobj-link)
else()
  set(_kernel_flags -xcce --cce-aicore-arch=${COMBINE_NPU_ARCH}
    "SHELL:-mllvm -cce-aicore-stack-size=0x8000"
    "SHELL:-mllvm -cce-aicore-function-stack-size=0x8000"
    "SHELL:-mllvm -cce-aicore-record-overflow=true"
    "SHELL:-mllvm -cce-aicore-addr-transform"
    "SHELL:-mllvm -cce-aicore-dcci-insert-for-scalar=false")
  set(_link_flags --cce-fatobj-link --cce-aicore-arch=${COMBINE_NPU_ARCH})
endif()
# The kernel's host half (launch_combine) calls libshmem (util_get_ffts_config), so the library
# links it too; the driver finds libcombine_kernel.so in this folder through its RPATH.
set(_npu_rpath "${COMBINE_SHMEM_ROOT}/lib;${COMBINE_CANN_LIBDIR}")
# Your own kernel (COMBINE_KERNEL_DIR, CMakeLists.txt): its sources as they are, with its folder
# on the include path instead of kernels/ (its combine_kernel.h is its own), as SHMEM's examples
# compile theirs.
if(COMBINE_KERNEL_DIR)
  set(_kernel_sources ${COMBINE_KERNEL_SOURCES})
  set(_kernel_includes "${COMBINE_KERNEL_DIR}")
else()
  set(_kernel_sources ${COMBINE_KERNEL_SOURCE})
  set(_kernel_includes kernels host)
endif()
# One recipe for every device-code library (the combine's kernel here, the probe's in
# cmake/probe.cmake): bisheng's kernel flags, SHMEM and CANN includes, the link set chosen above.
# combine_npu_kernel_library(<target> INCLUDES <dir>... SOURCES <file>... [EXCLUDE_FROM_ALL])
function(combine_npu_kernel_library target)
  cmake_parse_arguments(K "EXCLUDE_FROM_ALL" "" "INCLUDES;SOURCES" ${ARGN})
  if(K_EXCLUDE_FROM_ALL)
    add_library(${target} SHARED EXCLUDE_FROM_ALL ${K_SOURCES})
  else()
    add_library(${target} SHARED ${K_SOURCES})
  endif()
  target_include_directories(${target} PRIVATE ${K_INCLUDES} ${COMBINE_SHMEM_INCLUDES} ${COMBINE_CANN_INCLUDES})
  target_compile_definitions(${target} PRIVATE ${_npu_defs})
  target_compile_options(${target} PRIVATE ${_kernel_flags} -O2 -Wno-macro-redefined -Wno-ignored-attributes
                         ${COMBINE_SHMEM_COMPILE_FLAGS})
  target_link_options(${target} PRIVATE ${_link_flags})
  target_link_directories(${target} PRIVATE "${COMBINE_CANN_LIBDIR}")
  target_link_libraries(${target} PRIVATE ${COMBINE_NPU_LINK_LIBS} "${COMBINE_SHMEM_LIB}")
  if(COMBINE_UNIFIED_DLOG)
    target_link_libraries(${target} PRIVATE unified_dlog)
  endif()
  set_target_properties(${target} PROPERTIES BUILD_RPATH "${_npu_rpath}")
endfunction()
combine_npu_kernel_library(combine_kernel INCLUDES ${_kernel_includes} SOURCES ${_kernel_sources})

# ---- the host driver: plain C++ (bisheng told -xc++, as SHMEM's examples compile main.cpp),
# linked with the kernel library ----
if(COMBINE_KERNEL_DIR AND COMBINE_KERNEL_MAIN)
  # The folder's own driver (SHMEM's examples build theirs this way), linked with its kernel.
  add_executable(${COMBINE_KERNEL_MAIN} "${COMBINE_KERNEL_DIR}/main.cpp")
  target_include_directories(${COMBINE_KERNEL_MAIN} PRIVATE "${COMBINE_KERNEL_DIR}" ${COMBINE_KERNEL_INCLUDES}
                             ${COMBINE_SHMEM_INCLUDES} ${COMBINE_CANN_INCLUDES})
  target_compile_definitions(${COMBINE_KERNEL_MAIN} PRIVATE ${_npu_defs})
  target_compile_options(${COMBINE_KERNEL_MAIN} PRIVATE ${COMBINE_SHMEM_CPP_FLAGS})
  target_link_directories(${COMBINE_KERNEL_MAIN} PRIVATE "${COMBINE_CANN_LIBDIR}")
  target_link_libraries(${COMBINE_KERNEL_MAIN} PRIVATE ${COMBINE_NPU_LINK_LIBS} "${COMBINE_SHMEM_LIB}" combine_kernel)
  set_target_properties(${COMBINE_KERNEL_MAIN} PROPERTIES BUILD_RPATH "${_npu_rpath}")
  return()
endif()
set(_host_extra "")
if(COMBINE_KERNEL_DIR)
  # The driver's call into your kernel, compiled against your combine_kernel.h alone.
  add_library(combine_user_entry OBJECT host/user_kernel.cpp)
  target_include_directories(combine_user_entry PRIVATE "${COMBINE_KERNEL_DIR}" host ${COMBINE_SHMEM_INCLUDES}
                             ${COMBINE_CANN_INCLUDES})
  target_compile_definitions(combine_user_entry PRIVATE ${_npu_defs})
  target_compile_options(combine_user_entry PRIVATE ${COMBINE_SHMEM_CPP_FLAGS})
  set(_host_extra $<TARGET_OBJECTS:combine_user_entry>)
endif()
add_executable(combine_host ${COMBINE_HOST_SOURCES} ${_host_extra})
target_include_directories(combine_host PRIVATE kernels host ${COMBINE_SHMEM_INCLUDES} ${COMBINE_CANN_INCLUDES})
target_compile_definitions(combine_host PRIVATE ${_npu_defs})
if(COMBINE_KERNEL_DIR)
  target_compile_definitions(combine_host PRIVATE COMBINE_USER_KERNEL=1)
endif()
target_compile_options(combine_host PRIVATE ${COMBINE_SHMEM_CPP_FLAGS})
target_link_directories(combine_host PRIVATE "${COMBINE_CANN_LIBDIR}")
target_link_libraries(combine_host PRIVATE ${COMBINE_NPU_LINK_LIBS} "${COMBINE_SHMEM_LIB}" combine_kernel)
set_target_properties(combine_host PROPERTIES BUILD_RPATH "${_npu_rpath}")

message(STATUS "combine_lab NPU: bisheng ${CMAKE_CXX_COMPILER} (${COMBINE_BISHENG_FLAGS} flags), CANN ${ASCEND_HOME_PATH}, "
               "SHMEM ${COMBINE_SHMEM_ROOT}, SoC '${COMBINE_NPU_SOC}' -> ${COMBINE_NPU_ARCH}, SDMA ${COMBINE_NPU_SDMA}")
