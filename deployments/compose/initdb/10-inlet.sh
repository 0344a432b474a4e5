#!/bin/sh
# Runs once, when the postgres container initialises an empty data directory
# (files in /docker-entrypoint-initdb.d run in name order, as POSTGRES_USER).
set -e

# Inlet's settings (synchronous_commit, max_connections, …), read at every
# start from the mounted ../postgres/inlet.conf.
echo "include_if_exists = '/etc/postgresql/inlet.conf'" >> "$PGDATA/postgresql.conf"

# A login role per service (../postgres/roles.sql).
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
	-v ingress_password="${INLET_INGRESS_DB_PASSWORD:?}" \
	-v streamer_password="${INLET_STREAMER_DB_PASSWORD:?}" \
	-v consumer_password="${INLET_CONSUMER_DB_PASSWORD:?}" \
	-f /etc/postgresql/inlet-roles.sql
