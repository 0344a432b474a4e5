package backfill

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// ErrStateMismatch is returned when the state file belongs to a backfill with
// other parameters (another repository, --since or --types): resuming it would
// skip events. Run with Restart, or remove the file.
var ErrStateMismatch = errors.New("state file is for a different backfill")

// ErrStateUnreadable marks a state file that cannot be read or parsed (half
// written by another program, edited by hand): running again fails the same
// way. Run with Restart, or remove the file.
var ErrStateUnreadable = errors.New("state file unreadable")

// state is the resume point of an unfinished backfill, as kept in the file.
type state struct {
	Source string `json:"source"`
	Key    string `json:"key"`    // the provider's query (Lister.Key)
	Cursor string `json:"cursor"` // where the next page starts
	// Pinned is what the query resolved from the clock (a relative
	// --since), so a resumed run asks for the same (pinner).
	Pinned    string    `json:"pinned,omitempty"`
	Pages     int       `json:"pages"` // pages finished so far, for the progress line
	UpdatedAt time.Time `json:"updated_at"`
}

// loadState reads path; no file is no state.
func loadState(path string) (*state, error) {
	b, err := os.ReadFile(path) //nolint:gosec // G304: the operator's own -state file
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read backfill state %s: %w: %w", path, ErrStateUnreadable, err)
	}
	var s state
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("read backfill state %s: %w: %w (remove it, or run with --restart)", path, ErrStateUnreadable, err)
	}
	return &s, nil
}

// save writes s to path atomically (a temporary file synced, then renamed over
// it, then the directory synced), so an interruption or a power cut leaves the
// old cursor or the new one, never half a file or an empty one.
func (s *state) save(path string) error {
	s.UpdatedAt = time.Now().UTC()
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("write backfill state: %w", err)
	}
	f, err := os.CreateTemp(dir, filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("write backfill state: %w", err)
	}
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return fmt.Errorf("write backfill state %s: %w", path, err)
	}
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("write backfill state %s: sync directory: %w", path, err)
	}
	return nil
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir) //nolint:gosec // G304: the directory of the operator's own -state file
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

func removeState(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove finished backfill state %s: %w", path, err)
	}
	return nil
}
