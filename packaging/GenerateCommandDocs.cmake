# Man page and bash completion of a command, generated from the command's own --help (and, for
# CLI11 programs, every subcommand's --help), so neither can drift from the program.
#
#   cmake -DPROGRAM=<path> -DNAME=pipestudio-cli -DVERSION=0.1 -DSUMMARY="…" \
#         -DMAN_OUT=<file.1.gz> -DCOMPLETION_OUT=<file> -P GenerateCommandDocs.cmake

cmake_minimum_required(VERSION 3.25)
foreach(var PROGRAM NAME VERSION MAN_OUT COMPLETION_OUT)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "GenerateCommandDocs.cmake: ${var} is not set")
  endif()
endforeach()

# The help text of `PROGRAM <args> --help` (stdout, else stderr), as a list of lines.
function(help_of out)
  execute_process(COMMAND ${PROGRAM} ${ARGN} --help OUTPUT_VARIABLE text ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(text STREQUAL "")
    set(text "${err}")
  endif()
  if(text STREQUAL "")
    message(FATAL_ERROR "${PROGRAM} ${ARGN} --help printed nothing (exit ${rc})")
  endif()
  string(REPLACE ";" "\\;" text "${text}")
  string(REPLACE "\n" ";" lines "${text}")
  set(${out} "${lines}" PARENT_SCOPE)
endfunction()

# Subcommand names listed under "Subcommands:" in CLI11's help.
function(subcommands_of out lines)
  set(names)
  set(inside FALSE)
  foreach(line IN LISTS lines)
    if(line MATCHES "^Subcommands:")
      set(inside TRUE)
    elseif(inside AND line MATCHES "^  ([a-z][a-z0-9-]*)( |$)")
      list(APPEND names "${CMAKE_MATCH_1}")
    elseif(inside AND NOT line MATCHES "^ ")
      set(inside FALSE)
    endif()
  endforeach()
  set(${out} "${names}" PARENT_SCOPE)
endfunction()

# Every option a help text names (--long and -s).
function(options_of out lines)
  set(options)
  foreach(line IN LISTS lines)
    string(REGEX MATCHALL "--[a-z][a-z0-9-]*" longs "${line}")
    string(REGEX MATCHALL "(^|[ ,])-[a-zA-Z](,| |$)" shorts "${line}")
    foreach(s IN LISTS shorts)
      string(REGEX MATCH "-[a-zA-Z]" s "${s}")
      list(APPEND options "${s}")
    endforeach()
    list(APPEND options ${longs})
  endforeach()
  list(REMOVE_DUPLICATES options)
  set(${out} "${options}" PARENT_SCOPE)
endfunction()

# Lines as a troff no-fill block: backslashes escaped, control characters at line starts guarded.
function(troff_block out lines)
  set(body ".nf\n")
  foreach(line IN LISTS lines)
    string(REPLACE "\\" "\\e" line "${line}")
    if(line MATCHES "^[.']")
      set(line "\\&${line}")
    endif()
    string(APPEND body "${line}\n")
  endforeach()
  string(APPEND body ".fi\n")
  set(${out} "${body}" PARENT_SCOPE)
endfunction()

string(TOUPPER "${NAME}" upper)
help_of(main_help)
list(GET main_help 0 first_line)
if(NOT DEFINED SUMMARY OR SUMMARY STREQUAL "")
  set(SUMMARY "${first_line}")
endif()
string(REPLACE "-" "\\-" name_escaped "${NAME}")
set(man ".TH ${upper} 1 \"\" \"PipeStudio ${VERSION}\" \"User Commands\"\n")
string(APPEND man ".SH NAME\n${name_escaped} \\- ${SUMMARY}\n")
troff_block(block "${main_help}")
string(APPEND man ".SH DESCRIPTION\nGenerated from \\fB${name_escaped} \\-\\-help\\fR.\n${block}")

# Completion: options per command path; subcommands per level.
subcommands_of(subs "${main_help}")
options_of(top_options "${main_help}")
set(cases "")
set(inner_cases "")
if(subs)
  string(APPEND man ".SH COMMANDS\n")
  foreach(sub IN LISTS subs)
    help_of(sub_help ${sub})
    troff_block(block "${sub_help}")
    string(APPEND man ".SS \"${NAME} ${sub}\"\n${block}")
    options_of(sub_options "${sub_help}")
    subcommands_of(nested "${sub_help}")
    list(JOIN sub_options " " joined)
    list(JOIN nested " " nested_joined)
    string(APPEND cases "    ${sub}) words=\"${nested_joined} ${joined}\" ;;\n")
    foreach(inner IN LISTS nested)
      help_of(inner_help ${sub} ${inner})
      troff_block(block "${inner_help}")
      string(APPEND man ".SS \"${NAME} ${sub} ${inner}\"\n${block}")
      options_of(inner_options "${inner_help}")
      list(JOIN inner_options " " joined)
      string(APPEND inner_cases "    ${sub}/${inner}) words=\"${joined}\" ;;\n")
    endforeach()
  endforeach()
endif()
string(APPEND man ".SH SEE ALSO\n\\fBpipestudio\\fR(1), \\fBpipestudio\\-cli\\fR(1), \\fBpipestudio\\-exec\\fR(1)\n")

# The man page, gzip'd as Debian ships them (no name or time stamp in the header).
get_filename_component(man_dir "${MAN_OUT}" DIRECTORY)
file(MAKE_DIRECTORY "${man_dir}")
string(REGEX REPLACE "\\.gz$" "" man_plain "${MAN_OUT}")
file(WRITE "${man_plain}" "${man}")
if(MAN_OUT MATCHES "\\.gz$")
  find_program(GZIP gzip REQUIRED)
  execute_process(COMMAND ${GZIP} -9nf "${man_plain}" RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "gzip ${man_plain} failed")
  endif()
endif()

# Bash completion: subcommands first, then the options of the (sub)command typed so far; file
# names besides (plans, models, traces, databases).
string(REPLACE "-" "_" function_name "_${NAME}")
list(JOIN subs " " subs_joined)
list(JOIN top_options " " top_joined)
file(WRITE "${COMPLETION_OUT}" "# bash completion for ${NAME}, generated from ${NAME} --help (PipeStudio ${VERSION})
${function_name}() {
  local cur=\${COMP_WORDS[COMP_CWORD]} sub= inner= w i
  for ((i = 1; i < COMP_CWORD; i++)); do
    w=\${COMP_WORDS[i]}
    [[ \$w == -* ]] && continue
    if [[ -z \$sub ]]; then
      case \" ${subs_joined} \" in *\" \$w \"*) sub=\$w ;; esac
    elif [[ -z \$inner ]]; then
      inner=\$w
    fi
  done
  local words=\"${top_joined} ${subs_joined}\"
  case \"\$sub\" in
${cases}  esac
  case \"\$sub/\$inner\" in
${inner_cases}  esac
  COMPREPLY=(\$(compgen -W \"\$words\" -- \"\$cur\"))
  if [[ \$cur != -* && ( -n \$sub || -z \"${subs_joined}\" ) ]]; then
    COMPREPLY+=(\$(compgen -f -- \"\$cur\"))
  fi
}
complete -o filenames -F ${function_name} ${NAME}
")
