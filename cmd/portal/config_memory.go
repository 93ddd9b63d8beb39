package main

import (
	"errors"
	"log/slog"
	"strconv"

	"github.com/sluicehq/sluice/internal/enforce/memstore"
)

// memorySettings are the settings of the in-memory counters.
func memorySettings() []setting {
	return []setting{
		{env: "PORTAL_MEMORY_MAX_SUBJECTS", flag: "memory-max-subjects", def: "auto",
			accepts: "auto (or 0): an eighth of the memory the process may use at 512 bytes a subject, from 50000 to 100000000; or a whole number from 1000 to 100000000: the most subjects the in-memory counters hold",
			set: func(c *Config, v string) error {
				if v == "auto" || v == "0" {
					c.MemoryMaxSubjects = 0
					return nil
				}
				n, err := strconv.Atoi(v)
				if err != nil || n < 1000 || n > memstore.MaxMaxSubjects {
					return errors.New("out of range")
				}
				c.MemoryMaxSubjects = n
				return nil
			}},
	}
}

// memoryMaxSubjects is the bound on subjects every memory store of the
// portal holds: n when PORTAL_MEMORY_MAX_SUBJECTS sets one, else the one
// the process's memory gives (memstore.MaxSubjectsFor), read once here so
// that every store agrees and the log says which was chosen and why.
func memoryMaxSubjects(n int, logger *slog.Logger) int {
	if n > 0 {
		logger.Info("in-memory counters: subject bound from PORTAL_MEMORY_MAX_SUBJECTS", "max_subjects", n)
		return n
	}
	mem := memstore.ProcessMemory()
	n = memstore.MaxSubjectsFor(mem.Bytes)
	logger.Info("in-memory counters: subject bound chosen by memory (PORTAL_MEMORY_MAX_SUBJECTS=auto)",
		"max_subjects", n, "memory_bytes", mem.Bytes, "memory_source", mem.Source,
		"share", "1/"+strconv.Itoa(memstore.MemoryShare), "bytes_per_subject", memstore.BytesPerSubject)
	return n
}
