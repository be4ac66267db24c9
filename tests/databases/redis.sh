cases_redis() { :; }
