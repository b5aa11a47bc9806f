# Builds the Debian package into a scratch folder, prints its contents and checks them (the
# Packaging.PackageContents test):
#   cmake -DBUILD_DIR=<build> -DCPACK=<cpack> -DCLI=<pipestudio-cli> -P CheckPackage.cmake
cmake_minimum_required(VERSION 3.25)
set(out ${BUILD_DIR}/test-output/package)
file(REMOVE_RECURSE ${out})
file(MAKE_DIRECTORY ${out})
execute_process(COMMAND ${CPACK} -G DEB -B ${out} WORKING_DIRECTORY ${BUILD_DIR} RESULT_VARIABLE rc
                OUTPUT_VARIABLE log ERROR_VARIABLE log)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cpack failed (${rc}):\n${log}")
endif()
file(GLOB debs ${out}/*.deb)
list(LENGTH debs count)
if(NOT count EQUAL 1)
  message(FATAL_ERROR "expected one .deb in ${out}, found ${count}:\n${log}")
endif()
execute_process(COMMAND dpkg-deb -c ${debs} OUTPUT_VARIABLE listing RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "dpkg-deb -c ${debs} failed")
endif()
message("${debs}:\n${listing}")

set(missing)
foreach(path
        usr/bin/pipestudio
        usr/bin/pipestudio-cli
        usr/bin/pipestudio-exec
        usr/share/applications/pipestudio.desktop
        usr/share/icons/hicolor/scalable/apps/pipestudio.svg
        usr/share/mime/packages/pipestudio.xml
        usr/share/man/man1/pipestudio-cli.1.gz
        usr/share/man/man1/pipestudio-exec.1.gz
        usr/share/bash-completion/completions/pipestudio-cli
        usr/share/bash-completion/completions/pipestudio-exec
        usr/share/pipestudio/workspaces/default.pipestudio
        usr/share/pipestudio/models/llama3-8b.json
        usr/share/pipestudio/clusters/h100-4x8-ib.json)
  string(REGEX MATCH " \\./${path}\n" found "${listing}\n")
  if(NOT found)
    list(APPEND missing ${path})
  endif()
endforeach()
if(missing)
  message(FATAL_ERROR "the package lacks: ${missing}")
endif()

# The packaged man page and desktop files say what the programs do today.
function(packaged out path)
  execute_process(COMMAND dpkg-deb --fsys-tarfile ${debs} COMMAND tar -xOf - ./${path} OUTPUT_VARIABLE text
                  RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "cannot extract ${path}")
  endif()
  set(${out} "${text}" PARENT_SCOPE)
endfunction()
packaged(desktop usr/share/applications/pipestudio.desktop)
foreach(line "Exec=pipestudio %f" "Icon=pipestudio" "MimeType=application/x-pipestudio-workspace;")
  string(FIND "${desktop}" "${line}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "pipestudio.desktop lacks '${line}'")
  endif()
endforeach()
packaged(mime usr/share/mime/packages/pipestudio.xml)
string(FIND "${mime}" "<glob pattern=\"*.pipestudio\"/>" at)
if(at EQUAL -1)
  message(FATAL_ERROR "the MIME type does not match *.pipestudio")
endif()
execute_process(COMMAND dpkg-deb --fsys-tarfile ${debs} COMMAND tar -xOf - ./usr/share/man/man1/pipestudio-cli.1.gz
                COMMAND gzip -dc OUTPUT_VARIABLE man RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR NOT man MATCHES "^\\.TH PIPESTUDIO-CLI 1")
  message(FATAL_ERROR "pipestudio-cli.1.gz is not a man page")
endif()
execute_process(COMMAND ${CLI} --help OUTPUT_VARIABLE help)
string(REGEX MATCH "Subcommands:.*" subcommands "${help}")
string(REGEX MATCHALL "\n  [a-z][a-z-]*" names "${subcommands}")
list(LENGTH names count)
if(count LESS 5)
  message(FATAL_ERROR "could not read the subcommands from pipestudio-cli --help")
endif()
foreach(name IN LISTS names)
  string(STRIP "${name}" name)
  string(FIND "${man}" ".SS \"pipestudio-cli ${name}\"" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "the man page has no section for 'pipestudio-cli ${name}'")
  endif()
endforeach()
message("package contents and desktop integration as expected (${count} subcommands in the man page)")
