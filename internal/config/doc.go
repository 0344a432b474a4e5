// Package config reads Inlet's one YAML configuration file: it keeps the
// top-level sections the running service reads, expands `${ENV}`,
// `${ENV:-default}` and `${file:PATH}` in every value (for secrets; a
// relative PATH is read from the config file's directory), decodes
// strictly (an unknown key is an error with its line), and hands each
// section to the type its service owns, which fills in its defaults and
// validates it (inletyaml composes them). It imports no service.
package config
