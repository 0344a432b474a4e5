package main

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// process is a child the bench started (nats-server, an inlet service), its
// output in a log file, in a process group of its own.
type process struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{} // closed once it has exited
}

// startProcess starts cmd with its stdout and stderr in a new file at log.
func startProcess(cmd *exec.Cmd, log string) (*process, error) {
	logf, err := os.Create(log)
	if err != nil {
		return nil, err
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	p := &process{cmd: cmd, log: log, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); logf.Close(); close(p.done) }()
	return p, nil
}

// terminate sends SIGTERM and waits, killing it after grace.
func (p *process) terminate(grace time.Duration) {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}
