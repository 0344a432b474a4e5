package streamer

import (
	"fmt"
	"log/slog"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestPublicationGoneRecognisedWhateverLcMessages (review helper-159, fixed; this describes the code before the fix):
// noticePublicationGone (replication.go, ~line 333) recognises the
// walsender's "publication does not exist" error by SQLSTATE 42704 AND by the
// English text's ASCII-quoted name, strings.Contains(Message, `"inlet_jobs"`).
// The message is translated by the server's lc_messages, which initdb takes
// from the environment's locale (a German, French or Spanish server has
// lc_messages = de_DE.UTF-8 etc., and a replication role may not change it:
// lc_messages is superuser-only). The translations PostgreSQL ships use other
// quotes; verbatim from the installed /usr/share/locale/*/LC_MESSAGES/
// postgres-15.mo (msgid `publication "%s" does not exist`):
//
//	de: Publikation »%s« existiert nicht
//	fr: la publication « %s » n'existe pas
//	es: no existe la publicación «%s»
//
// On such a server the flag is never set, so the slot is never dropped and
// dd24f25's fix does not apply: a publication dropped and created again while
// streaming leaves the replication wake source failing for ever (the same
// error on every reconnect, which explain() even turns into an
// ErrReplicationSetup logged at ERROR), exactly the failure dd24f25 says it
// fixed. (The real server in this harness cannot be switched to those
// languages: no such OS locale is installed, so this test feeds the server's
// own translated texts to the function.)
//
// Now: the condition is recognised from the SQLSTATE and the object
// name, whatever the language.
func TestPublicationGoneRecognisedWhateverLcMessages(t *testing.T) {
	for lang, msg := range map[string]string{
		"en": `publication "` + Publication + `" does not exist`,
		"de": "Publikation »" + Publication + "« existiert nicht",
		"fr": "la publication « " + Publication + " » n'existe pas",
		"es": "no existe la publicación «" + Publication + "»",
	} {
		r := &Replication{slot: "inlet_streamer", logger: slog.New(slog.DiscardHandler)}
		// As stream() wraps the walsender's ErrorResponse.
		err := fmt.Errorf("replication stream: %w", &pgconn.PgError{Severity: "ERROR", Code: "42704", Message: msg,
			Where: "slot \"inlet_streamer\", output plugin \"pgoutput\", in the change callback"})
		if !r.noticePublicationGone(err) || !r.publicationGone.Load() {
			t.Errorf("lc_messages %s: %q (SQLSTATE 42704) from the stream is not recognised as publication %s gone: "+
				"the slot is never dropped and recreated, the stream fails the same way on every reconnect", lang, msg, Publication)
		}
	}
}
